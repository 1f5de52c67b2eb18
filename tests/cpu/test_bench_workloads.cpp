// moegemm-bench's random MoE problems (bench/workloads.hpp, random_workloads): the same for a
// seed on every run, inside their caps, spread from decode to prefill. Built with the bench's
// workload code (bench/CMakeLists.txt).
#include "workloads.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace moegemm_bench;

TEST_CASE("random workloads: seed-stable, within their caps, decode to prefill",
          "[bench][random]") {
    const std::vector<Workload> a = random_workloads(200, 1);
    const std::vector<Workload> b = load_workloads("random:200:1");
    REQUIRE(a.size() == 200);
    REQUIRE(b.size() == 200);
    int decode = 0, prefill = 0, many_experts = 0, one_expert = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const Workload& w = a[i];
        INFO(w.name);
        CHECK(w.name == b[i].name);
        CHECK(w.rows == b[i].rows);
        CHECK(w.experts >= 1);
        CHECK(w.experts <= kRandomMaxExperts);
        CHECK(w.rows.size() == static_cast<size_t>(w.experts));
        for (const int64_t d : {w.n, w.k}) {
            CHECK(d % kRandomMinDim == 0);
            CHECK(d >= kRandomMinDim);
            CHECK(d <= kRandomMaxDim);
        }
        CHECK(2.0 * w.experts * w.n * w.k <= kRandomMaxWeightBytes);
        CHECK(w.total_rows() >= 1);
        CHECK(w.max_expert_rows() <= kRandomMaxExpertRows);
        const double per_expert = static_cast<double>(w.total_rows()) / w.experts;
        decode += per_expert <= 16;
        prefill += per_expert >= 512;
        many_experts += w.experts >= 128;
        one_expert += w.experts == 1;
    }
    // A spread the oracle can learn from, not one kind of problem.
    CHECK(decode >= 20);
    CHECK(prefill >= 20);
    CHECK(many_experts >= 20);
    CHECK(one_expert >= 1);
    // Another seed, other problems; the first problem of seed 1 as drawn today.
    CHECK(random_workloads(1, 2)[0].name != a[0].name);
    CHECK(a[0].name == "rand1-0-E105-k1-T75-N2304-K10496");
    CHECK(a[1].name == "rand1-1-E107-k2-T1682-N1280-K1280");
    CHECK(a[1].total_rows() == 3364);
    CHECK(a[1].max_expert_rows() == 686);
}

TEST_CASE("random workloads: malformed specifications are refused", "[bench][random]") {
    for (const char* bad : {"random:", "random:0", "random:x", "random:10:", "random:10:3x",
                            "random:10x", "random:1000001"}) {
        INFO(bad);
        CHECK_THROWS(load_workloads(bad));
    }
    CHECK(load_workloads("random:3:9").size() == 3);
}
