// Gated activations: the gate/up tensor map's shape (what TMA reads for each coordinate), the
// epilogue's index arithmetic (which gate and up rows a thread folds into which output column)
// and the fragment layout the fused operations index by, checked against each other and
// against the header's gate layouts, without a GPU.
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
    const int group = GENERATE(8, 32, 64, 128);
    if (box_rows % (2 * group) != 0) return;
    constexpr int64_t kExperts = 3, kK = 200;
    constexpr std::size_t kElement = 2;
    const GateUpMapShape m =
        gate_up_map_shape(kExperts, n, kK, kElement, box_rows, 64, interleaved, group);
    const int64_t row_bytes = kK * static_cast<int64_t>(kElement);
    CHECK(m.rank == (group == 8 ? 5 : 4));
    CHECK(m.dims[0] == static_cast<cuuint64_t>(kK));
    CHECK(m.dims[m.rank - 1] == static_cast<cuuint64_t>(kExperts));
    for (int d = 0; d + 1 < m.rank; ++d) {
        CHECK(m.strides[d] % 16 == 0);
        CHECK(m.strides[d] < (cuuint64_t{1} << 40));
    }
    // Box rows of 64 elements (128 bytes, one swizzle row); a tile's B is box_rows rows.
    CHECK(m.box[0] * kElement == 128);
    cuuint32_t box_rows_per_load = 1;
    for (int d = 1; d < m.rank; ++d) {
        CHECK(m.box[d] <= 256);
        box_rows_per_load *= m.box[d];
    }
    CHECK(static_cast<int>(box_rows_per_load) == (group == 8 ? box_rows : group));
    const int64_t tiles = (n + box_rows - 1) / box_rows;
    for (int64_t e = 0; e < kExperts; ++e) {
        std::set<int64_t> rows;
        for (int64_t s = 0; s < tiles * box_rows; ++s) {
            // The producer's coordinates for product column s (load_weights).
            int64_t pair = 0, kind = 0, offset = 0;
            if (group == 8) {
                const int64_t i_hi = s / 16, i_lo = s % 8;
                kind = (s / 8) % 2;
                pair = 8 * i_hi + i_lo;
                if (pair >= n / 2) continue;  // past the last group: never in a tile of n
                offset = static_cast<int64_t>(i_lo * m.strides[0] + kind * m.strides[1] +
                                              i_hi * m.strides[2] + e * m.strides[3]);
            } else {
                const int64_t tile = s / box_rows, part = s % box_rows / group;
                kind = part % 2;
                pair = tile * box_rows / 2 + part / 2 * group + s % group;
                if (pair >= static_cast<int64_t>(m.dims[1])) continue;  // zero-filled by TMA
                offset = static_cast<int64_t>(pair * m.strides[0] + kind * m.strides[1] +
                                              e * m.strides[2]);
            }
            REQUIRE(offset % row_bytes == 0);
            const int64_t row = offset / row_bytes;
            // What TMA reads at this coordinate is the row the epilogue attributes to it...
            CHECK(row == e * n + gate_up_row(static_cast<int32_t>(s), static_cast<int32_t>(n),
                                             interleaved, group));
            // ...which is the header's row of that pair and kind.
            CHECK(row - e * n == header_row(pair, static_cast<int>(kind), n, interleaved));
            rows.insert(row);
        }
        CHECK(rows.size() == static_cast<size_t>(n));  // every row of the expert, once
    }
}

TEST_CASE("gated epilogue: every thread folds the gate and up of its output column", "[gate_up]") {
    // A consumer's fragment: acc[4j + 2h + q] is product column first_col + 8j + 2(lane % 4)
    // + q, j < consumer_n / 8; its columns are one group of consumer_n / 2 pairs
    // (gate_up_group), so value i pairs with value i + consumer_n / 4 (j with j +
    // consumer_n / 16), into output column first_col / 2 + 8j + 2(lane % 4) + q (fold_gate_up).
    const bool interleaved = GENERATE(false, true);
    constexpr int32_t n = 1024;
    for (const int block_m : {64, 128}) {
        for (const int block_n : {128, 256}) {
            const int consumer_n = block_m == 128 ? block_n : block_n / 2;
            const int group = gate_up_group(false, block_m, block_n);
            CHECK(group == consumer_n / 2);
            for (int32_t first_col = 0; first_col + consumer_n <= n; first_col += consumer_n) {
                for (int lane = 0; lane < 32; ++lane) {
                    for (int j = 0; j < consumer_n / 16; ++j) {
                        for (int q = 0; q < 2; ++q) {
                            const int32_t first = first_col + 8 * j + 2 * (lane % 4) + q;
                            const int32_t second = first + consumer_n / 2;
                            const int32_t out = first_col / 2 + 8 * j + 2 * (lane % 4) + q;
                            CHECK(gate_up_row(first, n, interleaved, group) ==
                                  header_row(out, 0, n, interleaved));
                            CHECK(gate_up_row(second, n, interleaved, group) ==
                                  header_row(out, 1, n, interleaved));
                        }
                    }
                }
            }
        }
    }
}

TEST_CASE("gated swap-AB epilogue: the pair of a weight row and its row + 8", "[gate_up]") {
    // Swap-AB: acc[4j + 2h + q] of weight block w is product column first_col + 64w + 16 warp
    // + lane / 4 + 8h; h = 0 and 1 are the pair's two kinds, output column first_col / 2 + 32w
    // + 8 warp + lane / 4 (fold_gate_up<true>, run_swapped_epilogue).
    const bool interleaved = GENERATE(false, true);
    constexpr int32_t n = 1024;
    const int group = gate_up_group(true, 64, GENERATE(128, 256));
    CHECK(group == 8);
    for (int32_t first_col : {0, 64, 128, 256, 512}) {
        for (int w = 0; w < 2; ++w) {
            for (int warp = 0; warp < 4; ++warp) {
                for (int lane = 0; lane < 32; ++lane) {
                    const int32_t s = first_col + 64 * w + 16 * warp + lane / 4;
                    const int32_t out = first_col / 2 + 32 * w + 8 * warp + lane / 4;
                    CHECK(gate_up_row(s, n, interleaved, group) == header_row(out, 0, n, interleaved));
                    CHECK(gate_up_row(s + 8, n, interleaved, group) ==
                          header_row(out, 1, n, interleaved));
                }
            }
        }
    }
}

TEST_CASE("fragment layout: each value's row and column, and the pairs the gated fold takes",
          "[gate_up]") {
    for (const int count : {32, 64, 128}) {
        // Consumers: acc[4j + 2h + q] at row + 8h, column + 8j + q.
        using Plain = FragmentLayout<false>;
        std::set<int> rows, columns;
        for (int i = 0; i < count; ++i) {
            const int j = i / 4, h = i / 2 % 2, q = i % 2;
            CHECK(Plain::row_offset(Plain::row_index(i)) == 8 * h);
            CHECK(Plain::column_offset(Plain::column_index(i)) == 8 * j + q);
            rows.insert(Plain::row_index(i));
            columns.insert(Plain::column_index(i));
        }
        CHECK(static_cast<int>(rows.size()) == Plain::rows(count));
        CHECK(static_cast<int>(columns.size()) == Plain::columns(count));
        CHECK(*rows.rbegin() == Plain::rows(count) - 1);
        CHECK(*columns.rbegin() == Plain::columns(count) - 1);
        // The fold pairs value k with k + count / 2: the same row, the column a group (count:
        // half the consumer's 2 count columns) further.
        for (int k = 0; k < count / 2; ++k) {
            CHECK(Plain::row_index(k) == Plain::row_index(k + count / 2));
            CHECK(Plain::column_offset(Plain::column_index(k + count / 2)) ==
                  Plain::column_offset(Plain::column_index(k)) + count);
        }
        // Swap-AB: acc[4j + 2h + q] at token + 8j + q, weight column + 8h.
        using Swapped = FragmentLayout<true>;
        rows.clear();
        columns.clear();
        for (int i = 0; i < count; ++i) {
            const int j = i / 4, h = i / 2 % 2, q = i % 2;
            CHECK(Swapped::row_offset(Swapped::row_index(i)) == 8 * j + q);
            CHECK(Swapped::column_offset(Swapped::column_index(i)) == 8 * h);
            rows.insert(Swapped::row_index(i));
            columns.insert(Swapped::column_index(i));
        }
        CHECK(static_cast<int>(rows.size()) == Swapped::rows(count));
        CHECK(static_cast<int>(columns.size()) == Swapped::columns(count));
        // The fold pairs acc[4j + q] with acc[4j + 2 + q]: one token, weight rows 8 apart.
        for (int k = 0; k < count / 2; ++k) {
            const int first = 4 * (k / 2) + k % 2, second = first + 2;
            CHECK(Swapped::row_index(first) == Swapped::row_index(second));
            CHECK(Swapped::column_offset(Swapped::column_index(second)) ==
                  Swapped::column_offset(Swapped::column_index(first)) + 8);
        }
    }
}
