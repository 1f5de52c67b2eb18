// Gated activations: the gate/up tensor map's shape (what TMA reads for each coordinate) and
// the epilogue's index arithmetic (which gate and up rows a thread folds into which output
// column), checked against each other and against the header's gate layouts, without a GPU.
#include <cstdint>
#include <set>

#include <catch2/catch.hpp>

#include "native/grouped_gemm_params.hpp"
#include "native/tensor_map.hpp"

using namespace moegemm::native;

namespace {

// The B row of expert e's [n, k] matrix that holds the gate (kind 0) or up (kind 1) of pair i.
int64_t header_row(int64_t i, int kind, int64_t n, bool interleaved) {
    return interleaved ? 2 * i + kind : kind * (n / 2) + i;
}

}  // namespace

TEST_CASE("gate/up map: each coordinate reads the row gate_up_row names", "[gate_up]") {
    const bool interleaved = GENERATE(false, true);
    const int64_t n = GENERATE(16, 48, 400, 1536);
    const int box_rows = GENERATE(128, 256);
    constexpr int64_t kExperts = 3, kK = 200;
    constexpr std::size_t kElement = 2;
    const GateUpMapShape m = gate_up_map_shape(kExperts, n, kK, kElement, box_rows, 64, interleaved);
    const int64_t row_bytes = kK * static_cast<int64_t>(kElement);
    CHECK(m.dims[0] == static_cast<cuuint64_t>(kK));
    CHECK(m.dims[1] == 8);
    CHECK(m.dims[2] == 2);
    CHECK(m.dims[3] * 16 == static_cast<cuuint64_t>(n));
    CHECK(m.dims[4] == static_cast<cuuint64_t>(kExperts));
    for (cuuint64_t stride : m.strides) {
        CHECK(stride % 16 == 0);
        CHECK(stride < (cuuint64_t{1} << 40));
    }
    // A box is one stage's B tile: box_rows rows of 64 elements (128 bytes, one swizzle row).
    CHECK(m.box[0] * kElement == 128);
    CHECK(static_cast<int>(m.box[1] * m.box[2] * m.box[3] * m.box[4]) == box_rows);
    CHECK(m.box[3] <= 256);
    for (int64_t e = 0; e < kExperts; ++e) {
        std::set<int64_t> rows;
        for (int32_t s = 0; s < n; ++s) {
            const int64_t i_hi = s / 16, kind = (s / 8) % 2, i_lo = s % 8;
            const int64_t offset = static_cast<int64_t>(i_lo * m.strides[0] + kind * m.strides[1] +
                                                        i_hi * m.strides[2] + e * m.strides[3]);
            REQUIRE(offset % row_bytes == 0);
            const int64_t row = offset / row_bytes;
            // What TMA reads at this coordinate is the row the epilogue attributes to it...
            CHECK(row == e * n + gate_up_row(s, static_cast<int32_t>(n), interleaved));
            // ...which is the header's row of pair 8 i_hi + i_lo of that kind.
            CHECK(row - e * n == header_row(8 * i_hi + i_lo, static_cast<int>(kind), n, interleaved));
            rows.insert(row);
        }
        CHECK(rows.size() == static_cast<size_t>(n));  // every row of the expert, once
    }
}

TEST_CASE("gated epilogue: every thread folds the gate and up of its output column", "[gate_up]") {
    // The consumers' fragment: acc[4j + 2h + q] is product column first_col + 8j + 2(lane % 4)
    // + q; j = 2m holds kind 0 and j = 2m + 1 kind 1 of output column first_col / 2 + 8m +
    // 2(lane % 4) + q (fold_gate_up).
    const bool interleaved = GENERATE(false, true);
    constexpr int32_t n = 512;
    for (int32_t first_col : {0, 64, 128, 256}) {  // a consumer's first product column
        for (int consumer_n : {64, 128, 256}) {
            if (first_col + consumer_n > n) continue;
            for (int lane = 0; lane < 32; ++lane) {
                for (int m = 0; m < consumer_n / 16; ++m) {
                    for (int q = 0; q < 2; ++q) {
                        const int32_t first = first_col + 8 * (2 * m) + 2 * (lane % 4) + q;
                        const int32_t second = first_col + 8 * (2 * m + 1) + 2 * (lane % 4) + q;
                        const int32_t out = first_col / 2 + 8 * m + 2 * (lane % 4) + q;
                        CHECK(gate_up_row(first, n, interleaved) == header_row(out, 0, n, interleaved));
                        CHECK(gate_up_row(second, n, interleaved) == header_row(out, 1, n, interleaved));
                    }
                }
            }
        }
    }
}

TEST_CASE("gated swap-AB epilogue: the pair of a weight row and its row + 8", "[gate_up]") {
    // Swap-AB: acc[4j + 2h + q] of weight block w is product column first_col + 64w + 16 warp
    // + lane / 4 + 8h; h = 0 and 1 are the pair's two kinds, output column first_col / 2 + 32w
    // + 8 warp + lane / 4 (fold_gate_up_swapped, run_swapped_epilogue).
    const bool interleaved = GENERATE(false, true);
    constexpr int32_t n = 1024;
    for (int32_t first_col : {0, 64, 128, 256, 512}) {
        for (int w = 0; w < 2; ++w) {
            for (int warp = 0; warp < 4; ++warp) {
                for (int lane = 0; lane < 32; ++lane) {
                    const int32_t s = first_col + 64 * w + 16 * warp + lane / 4;
                    const int32_t out = first_col / 2 + 32 * w + 8 * warp + lane / 4;
                    CHECK(gate_up_row(s, n, interleaved) == header_row(out, 0, n, interleaved));
                    CHECK(gate_up_row(s + 8, n, interleaved) == header_row(out, 1, n, interleaved));
                }
            }
        }
    }
}
