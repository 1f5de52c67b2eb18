// C++ consumer of the installed libmoegemm through find_package(moegemm) / moegemm::moegemm.
// Runs without a GPU: plan creation then fails cleanly with MOEGEMM_STATUS_NO_DEVICE.
#include <moegemm/moegemm.h>

#include <cstdio>
#include <cstring>
#include <memory>

namespace {

struct PlanDeleter {
    void operator()(moegemm_plan_s* plan) const { moegemm_plan_destroy(plan); }
};
using Plan = std::unique_ptr<moegemm_plan_s, PlanDeleter>;

}  // namespace

int main() {
    if (moegemm_get_version() != MOEGEMM_VERSION) {
        std::fprintf(stderr, "header %d, library %d\n", MOEGEMM_VERSION, moegemm_get_version());
        return 1;
    }
    std::printf("libmoegemm %s\n", moegemm_get_version_string());

    moegemm_problem_t problem;
    if (moegemm_problem_init(&problem) != MOEGEMM_STATUS_SUCCESS) return 1;
    problem.layout = MOEGEMM_LAYOUT_MASKED;
    problem.num_experts = 16;
    problem.n = 2048;
    problem.k = 1024;
    problem.max_rows = 512;
    problem.d_type = MOEGEMM_DTYPE_F32;

    moegemm_plan_t raw = nullptr;
    const moegemm_status_t st = moegemm_plan_create(&problem, &raw);
    std::printf("moegemm_plan_create: %s\n", moegemm_status_name(st));
    if (st == MOEGEMM_STATUS_SUCCESS) {
        Plan plan(raw);
        if (!plan) return 1;
        char text[MOEGEMM_DESCRIBE_MAX];
        if (moegemm_plan_describe(plan.get(), text, sizeof text) != MOEGEMM_STATUS_SUCCESS)
            return 1;
        std::printf("  %s\n", text);
        return 0;
    }
    if (st != MOEGEMM_STATUS_NO_DEVICE && st != MOEGEMM_STATUS_ARCH_MISMATCH) {
        std::fprintf(stderr, "unexpected: %s\n", moegemm_get_last_error_message());
        return 1;
    }
    std::printf("  detail: %s\n", moegemm_get_last_error_message());
    return (raw == nullptr && std::strlen(moegemm_get_last_error_message()) > 0) ? 0 : 1;
}
