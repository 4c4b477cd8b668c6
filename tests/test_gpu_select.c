/* test_gpu_select.c — which device a rank picks (kernels/gpu_select.h) under the bindings a
 * launcher can give: every rank sees the whole node, each rank sees one GPU, or something in
 * between that must be refused with the counts named. The expected device is stated per case,
 * from how the launcher binds, never computed by the function under test. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "kernels/gpu_select.h"

/* One case: what the rank sees, where it sits on its node, the device it must get (-1: refused). */
static void expect_device(int visible, int local_rank, int local_size, int want) {
    char err[256] = "";
    int got = zl_select_device(visible, local_rank, local_size, err, sizeof err);
    cr_expect_eq(got, want, "visible %d, local rank %d of %d: got device %d, want %d (%s)", visible, local_rank,
                 local_size, got, want, err);
    if (want >= 0) cr_expect(got < visible, "device %d is not among the %d visible", got, visible);
    if (want < 0) {
        cr_expect(err[0] != '\0', "a refusal must say why");
        cr_expect(strchr(err, '\n') == NULL, "one line: '%s'", err);
    }
}

Test(gpu_select, every_rank_sees_the_whole_node_takes_its_local_rank) {
    /* mpiexec -n 8 on an 8-GPU node: rank k -> device k. */
    for (int k = 0; k < 8; k++) expect_device(8, k, 8, k);
    /* 2 ranks on a 4-GPU node: devices 0 and 1; the other two stay idle. */
    expect_device(4, 0, 2, 0);
    expect_device(4, 1, 2, 1);
    /* One rank, one GPU. */
    expect_device(1, 0, 1, 0);
}

Test(gpu_select, one_gpu_bound_per_task_is_device_0) {
    /* srun --gpus-per-task=1 with 8 tasks per node: each sees one device, its own. */
    for (int k = 0; k < 8; k++) expect_device(1, k, 8, 0);
    expect_device(1, 1, 2, 0);
}

Test(gpu_select, between_the_two_is_refused_with_the_counts) {
    /* 4 ranks each seeing 2 devices (--gpus-per-task=2 or a half-set CUDA_VISIBLE_DEVICES). */
    char err[256] = "";
    cr_assert_eq(zl_select_device(2, 3, 4, err, sizeof err), -1);
    cr_expect(strstr(err, "4 ranks on this node") != NULL, "%s", err);
    cr_expect(strstr(err, "sees 2 CUDA devices") != NULL, "%s", err);
    for (int k = 0; k < 8; k++) expect_device(3, k, 8, -1);
    expect_device(7, 0, 8, -1);
}

Test(gpu_select, no_device_or_bad_position_is_refused) {
    expect_device(0, 0, 1, -1);
    expect_device(0, 3, 8, -1);
    expect_device(-1, 0, 1, -1);
    expect_device(4, 4, 4, -1);  /* local rank past the end */
    expect_device(4, -1, 4, -1);
    expect_device(4, 0, 0, -1);
}

Test(gpu_select, message_fits_a_small_buffer) {
    char err[16];
    memset(err, 'x', sizeof err);
    cr_assert_eq(zl_select_device(2, 0, 4, err, sizeof err), -1);
    cr_expect_eq(strlen(err), sizeof err - 1, "truncated, terminated: '%s'", err);
}

/* Two ranks of a node with the same device key share a GPU; empty keys (no device chosen) never
 * match. The pair is stated per case. */
static void expect_shared(const char *const *keys, int n, int want_first, int want_second) {
    char buf[8][16] = {{0}};
    for (int i = 0; i < n; i++) snprintf(buf[i], sizeof buf[i], "%s", keys[i]);
    int a = -1, b = -1, shared = zl_find_shared_device(&buf[0][0], sizeof buf[0], n, &a, &b);
    cr_expect_eq(shared, want_first >= 0, "shared %d, want %d", shared, want_first >= 0);
    if (want_first >= 0) cr_expect(a == want_first && b == want_second, "pair %d, %d; want %d, %d", a, b, want_first,
                                    want_second);
}

Test(gpu_select, ranks_with_one_device_key_share_it) {
    /* mpiexec -n 2 on a one-GPU machine: both see one device, the same bus id. */
    expect_shared((const char *[]){"0000:1b:00.0", "0000:1b:00.0"}, 2, 0, 1);
    /* srun --gpus-per-task=1: one device each, all different. */
    expect_shared((const char *[]){"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0"}, 4, -1, -1);
    /* the first pair by its second member: 1 and 2 before 0 and 3 */
    expect_shared((const char *[]){"a", "b", "b", "a"}, 4, 1, 2);
    expect_shared((const char *[]){"a", "b", "c", "a"}, 4, 0, 3);
    /* no device chosen (zl_backend_init says why): not a share */
    expect_shared((const char *[]){"", "", "x"}, 3, -1, -1);
    expect_shared((const char *[]){"x"}, 1, -1, -1);
    expect_shared((const char *[]){"x"}, 0, -1, -1);
}
