// SPDX-License-Identifier: MIT
// The Catch2 entry point shared by every test in fitlib_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
