/* The tests' one comparison (harness.h: test_difference and test_close):
 * identical arrays pass, a difference over the tolerance fails, and a NaN
 * or an infinity in the result or in the reference fails whatever the
 * tolerance, in floats and doubles under both scales. No device needed. */
#include "harness.h"

/* test_close's verdict on its own: 1 if it passed. The failure it counts
 * is taken back, so that only this test's CHECKs decide its exit. */
static int passes(const void *got, const void *want, size_t elem, int64_t n, test_scale scale,
                  double tol)
{
    const int before = test_failures;
    test_close("test_harness: a comparison meant to fail", 0, got, want, elem, n, scale, tol);
    const int passed = test_failures == before;
    test_failures = before;
    return passed;
}

static void test_floats(test_scale scale)
{
    const float want[5] = {1.0f, -2.0f, 0.5f, 100.0f, 0.0f};
    float got[5];
    memcpy(got, want, sizeof got);
    CHECK(test_difference(got, want, sizeof(float), 5, scale, NULL) == 0);
    CHECK(passes(got, want, sizeof(float), 5, scale, 0));
    CHECK(passes(got, want, sizeof(float), 5, scale, 1e-6));

    /* 100 -> 100.5: 5e-3 of the value (and of the array's largest). */
    got[3] = 100.5f;
    int64_t at = -1;
    const double d = test_difference(got, want, sizeof(float), 5, scale, &at);
    CHECK(fabs(d - 5e-3) < 1e-9 && at == 3);
    CHECK(passes(got, want, sizeof(float), 5, scale, 1e-2));
    CHECK(!passes(got, want, sizeof(float), 5, scale, 1e-3));
    got[3] = want[3];

    got[2] = NAN;                                  /* NaN in the result */
    CHECK(isinf(test_difference(got, want, sizeof(float), 5, scale, &at)) && at == 2);
    CHECK(!passes(got, want, sizeof(float), 5, scale, 1e30));
    for (int i = 0; i < 5; i++)                    /* all NaN: not a perfect score */
        got[i] = NAN;
    CHECK(isinf(test_difference(got, want, sizeof(float), 5, scale, NULL)));
    CHECK(!passes(got, want, sizeof(float), 5, scale, 1e30));
    memcpy(got, want, sizeof got);

    float bad[5];                                  /* NaN in the reference */
    memcpy(bad, want, sizeof bad);
    bad[4] = NAN;
    CHECK(isinf(test_difference(got, bad, sizeof(float), 5, scale, NULL)));
    CHECK(!passes(got, bad, sizeof(float), 5, scale, 1e30));
    CHECK(!passes(bad, bad, sizeof(float), 5, scale, 1e30));   /* NaN equals nothing */

    got[1] = INFINITY;                             /* infinity against a finite value */
    CHECK(isinf(test_difference(got, want, sizeof(float), 5, scale, NULL)));
    CHECK(!passes(got, want, sizeof(float), 5, scale, 1e30));
    CHECK(!passes(want, got, sizeof(float), 5, scale, 1e30));
    got[1] = -INFINITY;
    memcpy(bad, got, sizeof bad);                  /* the same infinities: equal */
    CHECK(test_difference(got, bad, sizeof(float), 5, scale, NULL) == 0);
    bad[1] = INFINITY;                             /* opposite infinities */
    CHECK(!passes(got, bad, sizeof(float), 5, scale, 1e30));
}

static void test_doubles(test_scale scale)
{
    const double want[3] = {0.25, -3.0, 7.0};
    double got[3] = {0.25, -3.0, 7.0};
    CHECK(passes(got, want, sizeof(double), 3, scale, 0));
    got[0] = 0.25 + 1e-3;
    CHECK(!passes(got, want, sizeof(double), 3, scale, 1e-5));
    got[0] = NAN;
    CHECK(!passes(got, want, sizeof(double), 3, scale, 1e30));
    got[0] = want[0];
    got[2] = -INFINITY;
    CHECK(!passes(got, want, sizeof(double), 3, scale, 1e30));
    CHECK(!passes(want, got, sizeof(double), 3, scale, 1e30));
}

int main(void)
{
    test_floats(TEST_PER_VALUE);
    test_floats(TEST_OF_ARRAY);
    test_doubles(TEST_PER_VALUE);
    test_doubles(TEST_OF_ARRAY);

    /* The scales: per value divides by max(1, |want[i]|), of the array by
     * the largest finite |want| (an infinity in want does not make every
     * difference 0). */
    const double want[2] = {0.001, 10.0}, got[2] = {0.002, 10.0};
    const double per_value = test_difference(got, want, sizeof(double), 2, TEST_PER_VALUE, NULL);
    const double of_array = test_difference(got, want, sizeof(double), 2, TEST_OF_ARRAY, NULL);
    CHECK(fabs(per_value - 1e-3) < 1e-12 && fabs(of_array - 1e-4) < 1e-12);
    const double want_inf[3] = {0.001, 10.0, INFINITY}, got_inf[3] = {0.002, 10.0, INFINITY};
    CHECK(fabs(test_difference(got_inf, want_inf, sizeof(double), 3, TEST_OF_ARRAY, NULL) - 1e-4)
          < 1e-12);

    /* A missing array fails; so does an element size that is neither. */
    CHECK(!passes(NULL, want, sizeof(double), 2, TEST_PER_VALUE, 1e30));
    CHECK(!passes(got, NULL, sizeof(double), 2, TEST_PER_VALUE, 1e30));
    CHECK(!passes(got, want, 2, 2, TEST_PER_VALUE, 1e30));
    CHECK(passes(got, want, sizeof(double), 0, TEST_PER_VALUE, 0));   /* nothing to compare */

    /* test_worst keeps the largest difference seen, NaN as infinity. */
    test_worst = 0;
    (void)passes(got, want, sizeof(double), 2, TEST_OF_ARRAY, 1);
    CHECK(fabs(test_worst - 1e-4) < 1e-12);
    const double nan_got[2] = {NAN, 10.0};
    (void)passes(nan_got, want, sizeof(double), 2, TEST_OF_ARRAY, 1);
    CHECK(isinf(test_worst));
    return test_finish("test_harness");
}
