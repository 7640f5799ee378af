// Links the backend the build was given (its headers and libcudnn); needs no GPU.
#include <catch2/catch_test_macros.hpp>
#include <cudnn.h>
#include <dlfcn.h>

#include <cstdlib>

TEST_CASE("cudnnGetVersion matches the headers", "[cudnn]") {
    size_t const loaded = cudnnGetVersion();
    REQUIRE(loaded / 10000 == CUDNN_MAJOR);
    REQUIRE(loaded == static_cast<size_t>(CUDNN_VERSION));
}

TEST_CASE("cudnnCreate wants a device", "[cudnn]") {
    // Its assertion says nothing of a GPU; without one only the backend's error log (stderr, in
    // the test case's own output) says why: "cudaGetDeviceCount(&count) != cudaSuccess".
    cudnnHandle_t handle = nullptr;
    cudnnStatus_t const status = cudnnCreate(&handle);
    REQUIRE(status == CUDNN_STATUS_SUCCESS);
    cudnnDestroy(handle);
}

TEST_CASE("links cuDNN and does not call it", "[cudnn]") {
    // its binary maps libcudnn as every test case of it does; nothing here calls into it, so its
    // evidence verifies no pin
    REQUIRE(CUDNN_MAJOR >= 9);
}

TEST_CASE("calls the cuDNN it is told to", "[cudnn]") {
    // With CPP_FIXTURE_STRAY_CUDNN naming a libcudnn.so.9 outside the cell's backend, the test case
    // maps that copy too (dlopen by path) and calls it: a pin not honoured. Without it, it calls
    // the linked one.
    char const* const stray = std::getenv("CPP_FIXTURE_STRAY_CUDNN");
    if (stray == nullptr) {
        REQUIRE(cudnnGetVersion() > 0);
        return;
    }
    void* const lib = dlopen(stray, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != nullptr);
    using GetVersion = size_t (*)();
    auto const get = reinterpret_cast<GetVersion>(dlsym(lib, "cudnnGetVersion"));
    REQUIRE(get != nullptr);
    REQUIRE(get() > 0);
}

TEST_CASE("fails from backend 9.13 on", "[cudnn][bisect]") {
    // what `bisect --cpp` finds (tests/integration/test_cpp_kind.py): 9.12 passes, 9.13 fails
    REQUIRE(cudnnGetVersion() < 91300);
}
