// CPU tests: everything that can be checked without a GPU.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
