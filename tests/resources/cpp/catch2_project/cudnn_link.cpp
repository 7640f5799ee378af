// Links the backend the build was given (its headers and libcudnn); needs no GPU.
#include <catch2/catch_test_macros.hpp>
#include <cudnn.h>

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
