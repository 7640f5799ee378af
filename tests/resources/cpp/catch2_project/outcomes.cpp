// One TEST_CASE per outcome the tool tells apart (tests/integration/test_cpp_kind.py).
#include <catch2/catch_test_macros.hpp>

#include <cstdio>
#include <iostream>

TEST_CASE("passes", "[outcome]") {
    int const answer = 6 * 7;
    REQUIRE(answer == 42);
}

TEST_CASE("fails an assertion", "[outcome]") {
    int const got = 2 + 2;
    CHECK(got == 4);
    REQUIRE(got == 5);
}

TEST_CASE("skips with a reason", "[outcome]") {
    SKIP("needs sm100 or newer, this is a fixture");
}

TEST_CASE("stderr noise, exit 0", "[outcome]") {
    std::fprintf(stderr, "error: this line only looks bad\n");
    std::cerr << "Segmentation fault (not really)" << std::endl;
    std::printf("plain stdout chatter\n");
    REQUIRE(true);
}

TEST_CASE("wants a device", "[outcome]") {
    // what the frontend's CUDA_CHECK says on a host without a driver
    FAIL("CUDA Error: CUDA driver version is insufficient for CUDA runtime version (35) at outcomes.cpp:31");
}

TEST_CASE("name, with [odd] * chars \\ here", "[outcome]") {
    REQUIRE(1 + 1 == 2);
}
