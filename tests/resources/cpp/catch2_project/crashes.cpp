// TEST_CASEs that end their process; each must be named as its own crash, and the cases after
// it must still run (tests/integration/test_cpp_kind.py).
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <csignal>
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

TEST_CASE("kills the tool when asked", "[crash]") {
    // With CPP_FIXTURE_KILL_TOOL set, it kills the tool running it (SIGKILL to the pid the tool
    // puts in CUDNN_MATRIX_PARENT_PID) and is still running when its batch dies with the tool:
    // on --resume it runs alone, and kills the tool again; then it is the tool-killed crash.
    char const* const asked = std::getenv("CPP_FIXTURE_KILL_TOOL");
    char const* const tool = std::getenv("CUDNN_MATRIX_PARENT_PID");
    if (asked != nullptr && tool != nullptr) {
        ::kill(static_cast<pid_t>(std::atoi(tool)), SIGKILL);
        std::this_thread::sleep_for(std::chrono::seconds(30));
    }
    REQUIRE(true);
}
