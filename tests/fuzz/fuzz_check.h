// TK_FUZZ_CHECK: an invariant of a fuzz target. Unlike assert() it stays on
// in release builds (the fuzz build is RelWithDebInfo, with NDEBUG), and it
// aborts, which libFuzzer reports as a crash and saves the input for.
#ifndef TENSORKEEP_TESTS_FUZZ_FUZZ_CHECK_H_
#define TENSORKEEP_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define TK_FUZZ_CHECK(cond)                                                          \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                           \
      std::abort();                                                                  \
    }                                                                                \
  } while (false)

#endif  // TENSORKEEP_TESTS_FUZZ_FUZZ_CHECK_H_
