// moegemm-bench's --rounds: several rounds of one row's measurements merged into one
// (bench/timing.hpp, combine_rounds). Built with the bench's timing code (bench/CMakeLists.txt).
#include "timing.hpp"

#include <catch2/catch.hpp>

#include <vector>

using moegemm_bench::combine_rounds;
using moegemm_bench::TimingStats;

namespace {

TimingStats round_of(double median, double min, double max, double mean, double back_to_back,
                     int reps) {
    TimingStats t;
    t.median_us = median;
    t.min_us = min;
    t.max_us = max;
    t.mean_us = mean;
    t.back_to_back_us = back_to_back;
    t.reps = reps;
    t.warmup_reps = 10;
    t.rotation_sets = 2;
    t.round_median_us = {median};
    return t;
}

}  // namespace

TEST_CASE("bench rounds: one slow round does not move the median of three", "[bench]") {
    // The second round fell into a slow stretch (the power cap lowering the clocks).
    const std::vector<TimingStats> rounds = {round_of(450.0, 446.0, 455.0, 450.5, 448.0, 100),
                                             round_of(590.0, 550.0, 650.0, 595.0, 580.0, 80),
                                             round_of(452.0, 447.0, 458.0, 452.0, 449.0, 100)};
    const TimingStats all = combine_rounds(rounds);
    CHECK(all.median_us == 452.0);
    CHECK(all.back_to_back_us == 449.0);
    CHECK(all.min_us == 446.0);
    CHECK(all.max_us == 650.0);
    CHECK(all.reps == 280);
    CHECK(all.warmup_reps == 30);
    CHECK(all.rotation_sets == 2);
    CHECK(all.mean_us == Approx((450.5 * 100 + 595.0 * 80 + 452.0 * 100) / 280));
    // Every round's median, in the order measured.
    CHECK(all.round_median_us == std::vector<double>{450.0, 590.0, 452.0});
}

TEST_CASE("bench rounds: two rounds give the mean of their medians; one round is itself",
          "[bench]") {
    const TimingStats a = round_of(100.0, 99.0, 103.0, 100.5, 98.0, 50);
    const TimingStats b = round_of(110.0, 108.0, 115.0, 110.5, 107.0, 50);
    const TimingStats two = combine_rounds({a, b});
    CHECK(two.median_us == 105.0);
    CHECK(two.back_to_back_us == 102.5);
    CHECK(two.round_median_us == std::vector<double>{100.0, 110.0});

    const TimingStats one = combine_rounds({b});
    CHECK(one.median_us == b.median_us);
    CHECK(one.min_us == b.min_us);
    CHECK(one.max_us == b.max_us);
    CHECK(one.mean_us == b.mean_us);
    CHECK(one.back_to_back_us == b.back_to_back_us);
    CHECK(one.reps == b.reps);
    CHECK(one.round_median_us == std::vector<double>{110.0});
}
