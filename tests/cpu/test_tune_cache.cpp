// The autotuner's results without a GPU: size buckets and keys, the text form and its file
// (missing, stale, corrupt, written through a rename), and how a plan's selection takes the
// fastest tuned kernel of the backends it may use that can serve the problem.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "heuristic.hpp"
#include "registry.hpp"
#include "tune_cache.hpp"

using namespace moegemm;

namespace {

DeviceCaps hopper(const char* name = "NVIDIA H100 80GB HBM3", int sms = 132) {
    DeviceCaps d;
    d.cc_major = 9;
    d.cc_minor = 0;
    d.sm_count = sms;
    d.name = name;
    d.smem_per_block_optin = 227 * 1024;
    d.l2_bytes = 50u << 20;
    return d;
}

// 8 experts, N = K = 4096, host sizes of 1,000 rows over 7 active experts.
ProblemSummary prefill() {
    ProblemSummary p;
    p.layout = MOEGEMM_LAYOUT_VARIABLE;
    p.sizes = SizesSource::Host;
    p.num_experts = 8;
    p.n = 4096;
    p.k = 4096;
    p.max_rows = 16384;
    p.total_rows = 1000;
    p.largest_expert = 400;
    p.active_experts = 7;
    return p;
}

std::string temp_path(const char* tag) {
    return "/tmp/moegemm_tune_" + std::string(tag) + "_" + std::to_string(getpid());
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

}  // namespace

TEST_CASE("tune cache: size buckets round rows and experts up to powers of two") {
    ProblemSummary p = prefill();
    CHECK(size_bucket(p) == "host rows<=256 experts<=8");  // 142 rows per active expert
    p.total_rows = 0;
    p.active_experts = 0;
    CHECK(size_bucket(p) == "host rows<=1 experts<=1");
    p.sizes = SizesSource::Device;
    p.expected_rows = 33;
    CHECK(size_bucket(p) == "device rows<=64");
    p.expected_rows = 0;
    CHECK(size_bucket(p) == "device rows unknown");
    p.layout = MOEGEMM_LAYOUT_MASKED;
    p.sizes = SizesSource::None;
    CHECK(size_bucket(p) == "no sizes");
}

TEST_CASE("tune cache: a key names the GPU, the problem, the bucket and the result's backend, on "
          "one line") {
    const ProblemSummary p = prefill();
    constexpr moegemm_backend_t N = MOEGEMM_BACKEND_NATIVE;
    const std::string key = tune_key(p, hopper(), N);
    CHECK(key != tune_key(p, hopper(), MOEGEMM_BACKEND_CUBLASLT));
    CHECK(key.find("result NATIVE") != std::string::npos);
    CHECK(key == tune_key(p, hopper(), N));
    CHECK(key.find("NVIDIA H100 80GB HBM3 sm=132") != std::string::npos);
    CHECK(key.find("host rows<=256 experts<=8") != std::string::npos);
    CHECK(key != tune_key(p, hopper("NVIDIA H200"), N));
    CHECK(key != tune_key(p, hopper("NVIDIA H100 80GB HBM3", 114), N));
    ProblemSummary q = p;
    q.n = 2048;
    CHECK(key != tune_key(q, hopper(), N));
    q = p;
    q.a_type = MOEGEMM_DTYPE_E4M3;
    CHECK(key != tune_key(q, hopper(), N));
    q = p;
    q.activation = MOEGEMM_ACTIVATION_SWIGLU;
    CHECK(key != tune_key(q, hopper(), N));
    q = p;
    q.total_rows = 2000;  // 285 rows per active expert: another bucket
    CHECK(key != tune_key(q, hopper(), N));
    q.total_rows = 1100;  // 157: the same bucket
    CHECK(key == tune_key(q, hopper(), N));
    const std::string odd = tune_key(p, hopper("GPU\twith\ntabs"), N);
    CHECK(odd.find('\t') == std::string::npos);
    CHECK(odd.find('\n') == std::string::npos);
}

TEST_CASE("tune cache: the text form round-trips; a stale or corrupt text changes nothing") {
    TuneCache cache;
    cache.put("key one", {"sm90_grouped_128x128", 12.5});
    cache.put("key two", {"sm90_grouped_64x128_swap_ab", 3.25});
    const std::string text = cache.serialize();
    CHECK(text.rfind(std::string(TuneCache::kHeader) + "\n", 0) == 0);

    TuneCache copy;
    std::string why;
    REQUIRE(copy.merge_text(text, &why));
    CHECK(copy.size() == 2);
    REQUIRE(copy.find("key two"));
    CHECK(copy.find("key two")->kernel == "sm90_grouped_64x128_swap_ab");
    CHECK(copy.find("key two")->microseconds == Approx(3.25));
    CHECK_FALSE(copy.find("key three"));
    // Lines ending in CR LF read as the same entries.
    std::string crlf;
    for (const char ch : text) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
    TuneCache from_crlf;
    CHECK(from_crlf.merge_text(std::string(TuneCache::kHeader) + "\n" +
                                   crlf.substr(std::string(TuneCache::kHeader).size() + 2),
                               &why));
    CHECK(from_crlf.size() == 2);

    const char* const bad[] = {
        "libmoegemm tune cache 0\nk\tsm90_grouped_128x128\t1.0\n",  // stale version
        // Version 1 kept one result per problem, of whichever backend won.
        "libmoegemm tune cache 1\nk\tsm90_grouped_128x128\t1.0\n",
        "",                                                          // empty
        "libmoegemm tune cache 2\nk\tsm90_grouped_128x128\n",        // two fields
        "libmoegemm tune cache 2\nk\tsm90_grouped_128x128\tfast\n",  // not a number
        "libmoegemm tune cache 2\nk\tsm90_grouped_128x128\t-1\n",    // negative
        "libmoegemm tune cache 2\n\tsm90_grouped_128x128\t1\n",      // empty key
        "libmoegemm tune cache 2\nk\tsm90_grouped_128x128\t1\textra\n",
        "libmoegemm tune cache 2\nk\tsm90_grouped_128x128\tinf\n",     // not finite
        "libmoegemm tune cache 2\nk\tsm90_grouped_128x128\t1.5x\n",    // trailing text
    };
    for (const char* text_of_file : bad) {
        INFO(text_of_file);
        TuneCache c;
        c.put("kept", {"sm90_grouped_128x256", 1.0});
        std::string reason;
        CHECK_FALSE(c.merge_text(text_of_file, &reason));
        CHECK_FALSE(reason.empty());
        CHECK(c.size() == 1);  // nothing added, nothing lost
        CHECK(c.find("kept"));
    }
}

TEST_CASE("tune cache: files are read and written whole; a missing one is a reason, not a crash") {
    const std::string path = temp_path("file");
    std::remove(path.c_str());
    TuneCache cache;
    std::string why;
    CHECK_FALSE(load_tune_file(path, cache, &why));
    CHECK(why.find("cannot open") != std::string::npos);

    cache.put("a key", {"sm90_grouped_128x256_tma_store", 101.0});
    REQUIRE(save_tune_file(path, cache, &why));
    TuneCache back;
    REQUIRE(load_tune_file(path, back, &why));
    CHECK(back.serialize() == cache.serialize());
    // No temporary file left beside it.
    std::ifstream temporary(path + ".tmp." + std::to_string(getpid()));
    CHECK_FALSE(temporary.good());

    write_file(path, "garbage\n");
    TuneCache untouched;
    CHECK_FALSE(load_tune_file(path, untouched, &why));
    CHECK(untouched.size() == 0);
    std::remove(path.c_str());

    CHECK_FALSE(save_tune_file("/nonexistent-directory/cache", cache, &why));
    CHECK(why.find("cannot create") != std::string::npos);
}

TEST_CASE("tune cache: the process's file is loaded when named, ignored when it cannot be used") {
    TuneCache& process = process_tune_cache();
    process.clear();
    const std::string path = temp_path("process");
    write_file(path, "libmoegemm tune cache 2\nsome key\tsm90_grouped_128x128\t7\n");
    CHECK(set_tune_cache_file(path));
    CHECK(tune_cache_file() == path);
    REQUIRE(process.find("some key"));

    write_file(path, "libmoegemm tune cache 2\nbroken line\n");
    CHECK_FALSE(set_tune_cache_file(path));  // logged and ignored
    CHECK(process.size() == 1);             // what was loaded stays

    // Saving writes what the process holds.
    process.put("another key", {"sm90_grouped_64x128", 2.0});
    save_process_tune_cache();
    TuneCache back;
    std::string why;
    REQUIRE(load_tune_file(path, back, &why));
    CHECK(back.size() == 2);

    CHECK_FALSE(set_tune_cache_file(""));
    CHECK(tune_cache_file().empty());
    process.clear();
    std::remove(path.c_str());
}

TEST_CASE("tune cache: a plan takes the fastest tuned kernel of the backends it may use, that "
          "can serve it") {
    const DeviceCaps d = hopper();
    const ProblemSummary p = prefill();
    const Selection heuristic = select_kernel(p, d);
    REQUIRE(heuristic.status == MOEGEMM_STATUS_SUCCESS);
    REQUIRE(variant(heuristic.kernel).backend == MOEGEMM_BACKEND_NATIVE);
    const std::string native_key = tune_key(p, d, MOEGEMM_BACKEND_NATIVE);
    const std::string cublaslt_key = tune_key(p, d, MOEGEMM_BACKEND_CUBLASLT);
    // Another native variant that serves the problem.
    const KernelVariant* other = nullptr;
    for (const KernelVariant* v = registry_begin(); v != registry_end(); ++v) {
        std::string why;
        if (v->backend == MOEGEMM_BACKEND_NATIVE && v->id != heuristic.kernel &&
            v->can_implement(p, d, &why)) {
            other = v;
            break;
        }
    }
    REQUIRE(other != nullptr);

    TuneCache cache;
    CHECK(apply_tune_cache(heuristic, p, d, cache).kernel == heuristic.kernel);  // empty

    cache.put(native_key, {other->name, 42.0});
    const Selection tuned = apply_tune_cache(heuristic, p, d, cache);
    CHECK(tuned.status == MOEGEMM_STATUS_SUCCESS);
    CHECK(tuned.tuned);
    CHECK(tuned.kernel == other->id);
    CHECK(tuned.reason.find("tuned") != std::string::npos);
    CHECK(tuned.reason.find(variant(heuristic.kernel).name) != std::string::npos);

    // Another GPU, another bucket: not this result.
    CHECK(apply_tune_cache(heuristic, p, hopper("NVIDIA H200"), cache).kernel == heuristic.kernel);
    ProblemSummary bigger = p;
    bigger.total_rows = 8000;
    CHECK(apply_tune_cache(select_kernel(bigger, d), bigger, d, cache).kernel ==
          select_kernel(bigger, d).kernel);

    // cuBLASLt's result beside the native one: the faster of the two where the plan may use
    // both (a plan being created, or one whose workspace covers both), the native one where
    // its workspace covers only native kernels, and none of cuBLASLt's where the problem
    // names the native backend.
    const uint32_t native_only = backend_bit(MOEGEMM_BACKEND_NATIVE);
    const uint32_t both = native_only | backend_bit(MOEGEMM_BACKEND_CUBLASLT);
    cache.put(cublaslt_key, {"cublaslt_expert_loop", 30.0});
    CHECK(variant(apply_tune_cache(heuristic, p, d, cache).kernel).backend ==
          MOEGEMM_BACKEND_CUBLASLT);
    CHECK(variant(apply_tune_cache(heuristic, p, d, cache, both).kernel).backend ==
          MOEGEMM_BACKEND_CUBLASLT);
    CHECK(apply_tune_cache(heuristic, p, d, cache, native_only).kernel == other->id);
    CHECK(apply_tune_cache(heuristic, p, d, cache, native_only).tuned);
    ProblemSummary named_native = p;
    named_native.backend = MOEGEMM_BACKEND_NATIVE;
    cache.put(tune_key(named_native, d, MOEGEMM_BACKEND_CUBLASLT), {"cublaslt_expert_loop", 1.0});
    CHECK(apply_tune_cache(heuristic, named_native, d, cache).kernel == heuristic.kernel);
    // Within kTunedGain of the heuristic's backend's result, that result stays (as autotune
    // decides); past it, the other backend's is taken.
    cache.put(cublaslt_key, {"cublaslt_expert_loop", 42.0 * (1.0 - kTunedGain / 2)});
    CHECK(apply_tune_cache(heuristic, p, d, cache).kernel == other->id);
    cache.put(cublaslt_key, {"cublaslt_expert_loop", 42.0 * (1.0 - 2 * kTunedGain)});
    CHECK(variant(apply_tune_cache(heuristic, p, d, cache).kernel).backend ==
          MOEGEMM_BACKEND_CUBLASLT);
    // A native kernel filed under cuBLASLt's key (a hand-edited file) is not taken from there.
    TuneCache misfiled;
    misfiled.put(cublaslt_key, {other->name, 1.0});
    CHECK(apply_tune_cache(heuristic, p, d, misfiled).kernel == heuristic.kernel);

    // A name this library does not have: the heuristic decides. So it does for a variant
    // that cannot serve the problem (E4M3 with BLOCK scales has no swap-AB kernel).
    TuneCache unknown;
    unknown.put(native_key, {"sm90_grouped_1024x1024", 1.0});
    CHECK(apply_tune_cache(heuristic, p, d, unknown).kernel == heuristic.kernel);
    ProblemSummary block = p;
    block.a_type = MOEGEMM_DTYPE_E4M3;
    block.scale_mode = MOEGEMM_SCALE_BLOCK;
    const Selection block_heuristic = select_kernel(block, d);
    REQUIRE(block_heuristic.status == MOEGEMM_STATUS_SUCCESS);
    unknown.put(tune_key(block, d, MOEGEMM_BACKEND_NATIVE), {"sm90_grouped_64x128_swap_ab", 1.0});
    CHECK(apply_tune_cache(block_heuristic, block, d, unknown).kernel == block_heuristic.kernel);

    // A failed selection stays failed.
    Selection refused;
    refused.status = MOEGEMM_STATUS_NOT_SUPPORTED;
    CHECK(apply_tune_cache(refused, p, d, cache).status == MOEGEMM_STATUS_NOT_SUPPORTED);
}

TEST_CASE("tune cache: MOEGEMM_TUNE_CACHE names the file the process starts with",
          "[.tune_env]") {
    // Hidden, in a process of its own (CTest cpu.tune_cache_env sets the variable): the
    // process's cache is created, and the variable read, at its first use, which this test
    // makes after writing the file.
    const char* path = std::getenv("MOEGEMM_TUNE_CACHE");
    if (path == nullptr || *path == '\0') {
        SUCCEED("MOEGEMM_TUNE_CACHE is not set: run through CTest's cpu.tune_cache_env");
        return;
    }
    write_file(path, "libmoegemm tune cache 2\nfrom the environment\tsm90_grouped_128x128\t3\n");
    REQUIRE(process_tune_cache().find("from the environment"));
    CHECK(tune_cache_file() == path);
    std::remove(path);
}
