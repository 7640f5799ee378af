// Links the backend the build was given (its headers and libcudnn); needs no GPU.
#include <catch2/catch_test_macros.hpp>
#include <cudnn.h>

TEST_CASE("cudnnGetVersion matches the headers", "[cudnn]") {
    size_t const loaded = cudnnGetVersion();
    REQUIRE(loaded / 10000 == CUDNN_MAJOR);
    REQUIRE(loaded == static_cast<size_t>(CUDNN_VERSION));
}
