/* Strict C99 consumer of the installed header and library:
 *     cc -std=c99 -pedantic-errors -Wall -Wextra -Werror -I<prefix>/include c99_consumer.c
 *        -L<prefix>/lib -lmoegemm
 * Proves that moegemm.h is plain C99 that needs no CUDA header, and exercises the parts of
 * the C API that work without a GPU. Exit status 0 when every check holds. */
#include <moegemm/moegemm.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            ++failures;                                                          \
        }                                                                        \
    } while (0)

int main(void) {
    moegemm_problem_t problem;
    moegemm_plan_t plan = NULL;
    moegemm_status_t st;
    size_t bytes = 0;
    char text[MOEGEMM_DESCRIBE_MAX];
    int s;

    /* Version: header and library agree. */
    CHECK(moegemm_get_version() == MOEGEMM_VERSION);
    sprintf(text, "%d.%d.%d", MOEGEMM_VERSION_MAJOR, MOEGEMM_VERSION_MINOR,
            MOEGEMM_VERSION_PATCH);
    CHECK(strcmp(moegemm_get_version_string(), text) == 0);

    /* Status text for every pinned value, and for an unknown one. */
    for (s = MOEGEMM_STATUS_SUCCESS; s <= MOEGEMM_STATUS_INTERNAL_ERROR; ++s) {
        CHECK(moegemm_status_string((moegemm_status_t)s) != NULL);
        CHECK(strncmp(moegemm_status_name((moegemm_status_t)s), "MOEGEMM_STATUS_", 15) == 0);
    }
    CHECK(strcmp(moegemm_status_name(MOEGEMM_STATUS_NO_DEVICE), "MOEGEMM_STATUS_NO_DEVICE") == 0);
    CHECK(strcmp(moegemm_status_name((moegemm_status_t)12345), "MOEGEMM_STATUS_UNKNOWN") == 0);
    CHECK(strcmp(moegemm_status_string((moegemm_status_t)12345), "unknown status") == 0);

    /* Bad arguments are rejected with a message, without a GPU. */
    CHECK((moegemm_problem_init)(NULL) == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK(strlen(moegemm_get_last_error_message()) > 0);
    CHECK(moegemm_plan_destroy(NULL) == MOEGEMM_STATUS_SUCCESS);
    CHECK(moegemm_plan_get_workspace_size(NULL, &bytes) == MOEGEMM_STATUS_INVALID_VALUE);

    CHECK(moegemm_problem_init(&problem) == MOEGEMM_STATUS_SUCCESS);
    CHECK(problem.struct_size == sizeof(moegemm_problem_t));
    CHECK(problem.layout == MOEGEMM_LAYOUT_VARIABLE);
    CHECK(moegemm_plan_create(&problem, &plan) == MOEGEMM_STATUS_INVALID_VALUE); /* E == 0 */
    CHECK(plan == NULL);

    /* A valid problem: a plan on a usable GPU, NO_DEVICE / ARCH_MISMATCH otherwise. */
    problem.layout = MOEGEMM_LAYOUT_FIXED;
    problem.num_experts = 4;
    problem.n = 256;
    problem.k = 128;
    problem.max_rows = 64;
    st = moegemm_plan_create(&problem, &plan);
    printf("moegemm_plan_create(valid problem): %s\n", moegemm_status_name(st));
    if (st == MOEGEMM_STATUS_SUCCESS) {
        CHECK(plan != NULL);
        CHECK(moegemm_plan_get_workspace_size(plan, &bytes) == MOEGEMM_STATUS_SUCCESS);
        CHECK(moegemm_plan_describe(plan, text, sizeof text) == MOEGEMM_STATUS_SUCCESS);
        printf("  plan: %s; workspace %lu bytes\n", text, (unsigned long)bytes);
        CHECK(moegemm_plan_destroy(plan) == MOEGEMM_STATUS_SUCCESS);
    } else {
        CHECK(st == MOEGEMM_STATUS_NO_DEVICE || st == MOEGEMM_STATUS_ARCH_MISMATCH);
        CHECK(plan == NULL);
        CHECK(strlen(moegemm_get_last_error_message()) > 0);
        printf("  detail: %s\n", moegemm_get_last_error_message());
    }

    if (failures != 0) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("OK\n");
    return 0;
}
