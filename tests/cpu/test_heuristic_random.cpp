// The heuristic's picks on moegemm-bench's seed-stable random MoE problems (random:200:1), host
// and device sizes, on an H100 SXM and an H200: a golden tally, so that a change of the policy
// (from the exhaustive oracle's runs, moegemm-bench --exhaustive) moves these counts on purpose.
#include <algorithm>
#include <map>
#include <string>

#include <catch2/catch.hpp>

#include "heuristic.hpp"
#include "registry.hpp"
#include "workloads.hpp"

using namespace moegemm;

namespace {

// name=count of each kernel picked, in name order.
const char* const kHostTally =
    "sm90_grouped_128x128_tma_store=17 sm90_grouped_128x256_tma_store=74 "
    "sm90_grouped_64x128_swap_ab=109 ";
const char* const kDeviceTally =
    "sm90_grouped_128x128_tma_store=17 sm90_grouped_128x256_tma_store=75 "
    "sm90_grouped_64x128_swap_ab=108 ";

DeviceCaps hopper(int sms, std::size_t l2_bytes) {
    DeviceCaps d;
    d.cc_major = 9;
    d.cc_minor = 0;
    d.sm_count = sms;
    d.name = "Hopper";
    d.smem_per_block_optin = 227 * 1024;
    d.l2_bytes = l2_bytes;
    return d;
}

/// The plan moegemm-bench makes of a workload: VARIABLE over its own rows, host sizes, or
/// device sizes with the mean rows per expert as expected_rows.
ProblemSummary summary_of(const moegemm_bench::Workload& w, bool device_sizes) {
    ProblemSummary p;
    p.layout = MOEGEMM_LAYOUT_VARIABLE;
    p.a_type = w.input_type;
    p.scale_mode = w.scale_mode;
    p.num_experts = w.experts;
    p.n = w.n;
    p.k = w.k;
    p.max_rows = w.total_rows();
    if (device_sizes) {
        p.sizes = SizesSource::Device;
        p.expected_rows = std::max<int64_t>(1, (w.total_rows() + w.experts - 1) / w.experts);
    } else {
        p.sizes = SizesSource::Host;
        p.total_rows = w.total_rows();
        p.largest_expert = w.max_expert_rows();
        p.active_experts = w.active_experts();
    }
    return p;
}

std::map<std::string, int> tally(bool device_sizes, const DeviceCaps& d) {
    std::map<std::string, int> counts;
    for (const moegemm_bench::Workload& w : moegemm_bench::random_workloads(200, 1)) {
        const Selection s = select_kernel(summary_of(w, device_sizes), d);
        ++counts[s.status == MOEGEMM_STATUS_SUCCESS ? variant(s.kernel).name : "refused"];
    }
    return counts;
}

std::string text_of(const std::map<std::string, int>& counts) {
    std::string text;
    for (const auto& [name, count] : counts) text += name + "=" + std::to_string(count) + " ";
    return text;
}

}  // namespace

TEST_CASE("heuristic: the picks on random:200:1 are pinned", "[heuristic][random]") {
    const DeviceCaps h100 = hopper(132, 50u << 20);  // an H100 SXM; an H200 has as many SMs
    for (const bool device_sizes : {false, true}) {
        INFO((device_sizes ? "device sizes" : "host sizes"));
        const std::map<std::string, int> counts = tally(device_sizes, h100);
        int total = 0;
        for (const auto& [name, count] : counts) total += count;
        CHECK(total == 200);
        CHECK(counts.count("refused") == 0);
        // The tally itself: update it when the policy changes on purpose.
        CHECK(text_of(counts) == (device_sizes ? kDeviceTally : kHostTally));
    }
}
