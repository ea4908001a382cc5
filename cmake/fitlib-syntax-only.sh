#!/bin/sh
# SPDX-License-Identifier: MIT
# Compiler launcher of fitlib's compile checks (cmake/FitlibCompileCheck.cmake): runs the compile command it is given
# with -fsyntax-only, so GCC or Clang parses, looks up and instantiates every template as a full build would but
# generates no code, then touches the object file the build expects, so that the check reruns only when a source
# or header it includes changes (the dependency file is still written).
out=
prev=
for arg in "$@"; do
  [ "$prev" = "-o" ] && out=$arg
  prev=$arg
done
"$@" -fsyntax-only || exit
[ -z "$out" ] || touch "$out"
