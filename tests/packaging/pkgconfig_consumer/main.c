/* A consumer of the installed libmoegemm, built with the flags of
 * `pkg-config --cflags --libs moegemm` alone. It needs no GPU: without one, plan creation
 * must fail cleanly with MOEGEMM_STATUS_NO_DEVICE (or ARCH_MISMATCH on a too-old GPU). */
#include <moegemm/moegemm.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    moegemm_problem_t problem;
    moegemm_plan_t plan = (moegemm_plan_t)&problem; /* sentinel: must survive a failure */
    moegemm_status_t st;

    if (moegemm_get_version() != MOEGEMM_VERSION) {
        fprintf(stderr, "header version %d but library version %d\n", MOEGEMM_VERSION,
                moegemm_get_version());
        return 1;
    }
    printf("libmoegemm %s\n", moegemm_get_version_string());

    st = moegemm_problem_init(&problem);
    if (st != MOEGEMM_STATUS_SUCCESS) {
        fprintf(stderr, "moegemm_problem_init: %s\n", moegemm_status_string(st));
        return 1;
    }
    problem.layout = MOEGEMM_LAYOUT_VARIABLE;
    problem.num_experts = 8;
    problem.n = 1024;
    problem.k = 512;
    problem.max_rows = 4096;

    st = moegemm_plan_create(&problem, &plan);
    printf("moegemm_plan_create: %s (%s)\n", moegemm_status_name(st), moegemm_status_string(st));
    switch (st) {
    case MOEGEMM_STATUS_SUCCESS:
        if (plan == NULL || plan == (moegemm_plan_t)&problem) {
            fprintf(stderr, "SUCCESS but no plan was returned\n");
            return 1;
        }
        st = moegemm_plan_destroy(plan);
        if (st != MOEGEMM_STATUS_SUCCESS) {
            fprintf(stderr, "moegemm_plan_destroy: %s\n", moegemm_status_string(st));
            return 1;
        }
        return 0;
    case MOEGEMM_STATUS_NO_DEVICE:
    case MOEGEMM_STATUS_ARCH_MISMATCH:
        printf("  detail: %s\n", moegemm_get_last_error_message());
        if (plan != (moegemm_plan_t)&problem) {
            fprintf(stderr, "a failed moegemm_plan_create wrote its output argument\n");
            return 1;
        }
        if (strlen(moegemm_get_last_error_message()) == 0) {
            fprintf(stderr, "a failed moegemm_plan_create left no error message\n");
            return 1;
        }
        return 0;
    default:
        fprintf(stderr, "unexpected status from a valid problem: %s: %s\n",
                moegemm_status_name(st), moegemm_get_last_error_message());
        return 1;
    }
}
