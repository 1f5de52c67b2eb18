// The fp8 layer's E4M3 quantizer (src/moe/quantize.hpp), compiled for the host, against a
// reference written from the format alone: the nearest of the 254 finite codes' values, ties
// to the code with an even mantissa, saturation at +-448.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "moe/quantize.hpp"
#include "support/e4m3.hpp"

using moegemm::moe::e4m3_code;
using moegemm::moe::group_scale;

namespace {

/// The code of y (already divided by the scale) by exhaustive search.
uint8_t reference_code(float y) {
    if (y == 0.0f) return std::signbit(y) ? 0x80 : 0x00;
    const double target = std::fmin(std::fabs(static_cast<double>(y)), 448.0);
    int best = 0;
    double best_error = INFINITY;
    for (int code = 0; code < 0x7F; ++code) {  // positive finite codes, increasing values
        const double error = std::fabs(mgt::e4m3_value(static_cast<uint8_t>(code)) - target);
        if (error < best_error || (error == best_error && (code & 1) == 0)) {
            best = code;
            best_error = error;
        }
    }
    return static_cast<uint8_t>(best | (y < 0.0f ? 0x80 : 0x00));
}

float bits_float(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

}  // namespace

TEST_CASE("E4M3 quantizer: every code, every midpoint, saturation, zero groups", "[quantize]") {
    SECTION("each finite code's value comes back as that code") {
        for (int code = 0; code < 256; ++code) {
            if ((code & 0x7F) == 0x7F) continue;  // NaN
            const float value = static_cast<float>(mgt::e4m3_value(static_cast<uint8_t>(code)));
            INFO("code " << code << " value " << value);
            // A zero keeps its sign through the division (scale 1).
            CHECK(e4m3_code(value, 1.0f) == static_cast<uint8_t>(code));
        }
    }
    SECTION("midpoints between neighbouring codes round to the even mantissa") {
        for (int code = 0; code < 0x7E; ++code) {
            const double lo = mgt::e4m3_value(static_cast<uint8_t>(code));
            const double hi = mgt::e4m3_value(static_cast<uint8_t>(code + 1));
            const auto mid = static_cast<float>((lo + hi) / 2);  // exact in fp32
            INFO("between codes " << code << " and " << code + 1);
            CHECK(e4m3_code(mid, 1.0f) == ((code & 1) == 0 ? code : code + 1));
            CHECK(e4m3_code(-mid, 1.0f) == (0x80 | ((code & 1) == 0 ? code : code + 1)));
            CHECK(e4m3_code(mid, 1.0f) == reference_code(mid));
        }
    }
    SECTION("past 448 saturates") {
        CHECK(e4m3_code(448.0f, 1.0f) == 0x7E);
        CHECK(e4m3_code(470.0f, 1.0f) == 0x7E);
        CHECK(e4m3_code(1e30f, 1.0f) == 0x7E);
        CHECK(e4m3_code(-1e30f, 1.0f) == 0xFE);
    }
    SECTION("a group of zeros has scale 0 and zero codes") {
        CHECK(group_scale(0.0f) == 0.0f);
        CHECK(e4m3_code(0.0f, 0.0f) == 0);
    }
    SECTION("random groups: the scale is amax / 448, the largest value maps to 448") {
        std::mt19937 rng(17);
        std::uniform_int_distribution<uint32_t> any_bits;
        for (int group = 0; group < 2000; ++group) {
            // Values of every magnitude fp32 has (finite, nonzero), random signs.
            std::vector<float> v(128);
            float amax = 0.0f;
            const int exponent_base = static_cast<int>(any_bits(rng) % 200) + 20;
            for (float& x : v) {
                const uint32_t bits = (any_bits(rng) & 0x807FFFFFu) |
                                      (static_cast<uint32_t>(exponent_base + any_bits(rng) % 20)
                                       << 23);
                x = bits_float(bits);
                amax = std::fmax(amax, std::fabs(x));
            }
            const float scale = group_scale(amax);
            REQUIRE(scale == amax / 448.0f);
            for (const float x : v) {
                INFO("x " << x << " scale " << scale);
                REQUIRE(e4m3_code(x, scale) == reference_code(x / scale));
                if (std::fabs(x) == amax) REQUIRE((e4m3_code(x, scale) & 0x7F) == 0x7E);
            }
        }
    }
}
