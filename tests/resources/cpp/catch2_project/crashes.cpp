// TEST_CASEs that end their process; each must be named as its own crash, and the cases after
// it must still run (tests/integration/test_cpp_kind.py).
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <cstdlib>
#include <thread>

TEST_CASE("aborts", "[crash]") {
    std::abort();
}

TEST_CASE("after abort passes", "[crash]") {
    REQUIRE(true);
}

TEST_CASE("segfaults", "[crash]") {
    volatile int* volatile nowhere = nullptr;
    *nowhere = 1;
}

TEST_CASE("after segfault passes", "[crash]") {
    REQUIRE(true);
}

TEST_CASE("hangs", "[crash]") {
    std::this_thread::sleep_for(std::chrono::hours(1));
}

TEST_CASE("after hang passes", "[crash]") {
    REQUIRE(true);
}
