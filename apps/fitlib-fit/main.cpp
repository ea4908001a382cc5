// SPDX-License-Identifier: MIT
// fitlib-fit: placeholder until the command line lands.
int main() { return 0; }
