# Smoke test of tensorkeep-bench (ctest -R tensorkeep_bench_smoke):
#   cmake -DBENCH=PATH -DBENCHMARKS=a,b -DOUT_DIR=DIR -P smoke_test.cmake
# Runs `tensorkeep-bench --quick --benchmarks=BENCHMARKS --json DIR/...` and
# fails unless it exits 0, every result line parses as
#   NAME FIGURE | BASELINE | RATIO | TARGET
# every benchmark asked for printed at least one line, and the JSON file has a
# result for each line. Missed targets do not fail it: --quick volumes are too
# small to judge; the figures are for `tensorkeep-bench` without --quick.
if(NOT BENCH OR NOT BENCHMARKS OR NOT OUT_DIR)
  message(FATAL_ERROR "usage: cmake -DBENCH=... -DBENCHMARKS=... -DOUT_DIR=... -P smoke_test.cmake")
endif()
file(MAKE_DIRECTORY "${OUT_DIR}")
set(json "${OUT_DIR}/tensorkeep_bench_smoke.json")
file(REMOVE "${json}")
execute_process(
  COMMAND "${BENCH}" --quick "--benchmarks=${BENCHMARKS}" --json "${json}"
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  RESULT_VARIABLE rc
  TIMEOUT 55)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tensorkeep-bench exited with ${rc}\n${err}")
endif()

string(REPLACE "\n" ";" lines "${out}")
set(in_results FALSE)
set(count 0)
set(names "")
foreach(line IN LISTS lines)
  if(line MATCHES "^-----")
    set(in_results TRUE)
    continue()
  endif()
  if(NOT in_results OR line STREQUAL "")
    continue()
  endif()
  if(NOT line MATCHES "^([A-Za-z0-9/+.-]+) +[^|]+ \\| [^|]+ \\| +([0-9]+\\.[0-9]+x|-) \\| (target: .+: (met|MISSED)|-)$")
    message(FATAL_ERROR "result line does not parse:\n${line}")
  endif()
  list(APPEND names "${CMAKE_MATCH_1}")
  math(EXPR count "${count} + 1")
endforeach()

string(REPLACE "," ";" wanted "${BENCHMARKS}")
foreach(b IN LISTS wanted)
  set(found FALSE)
  foreach(n IN LISTS names)
    if(n MATCHES "^${b}(/|$)")
      set(found TRUE)
    endif()
  endforeach()
  if(NOT found)
    message(FATAL_ERROR "no result line for benchmark '${b}'")
  endif()
endforeach()

if(NOT EXISTS "${json}")
  message(FATAL_ERROR "--json did not write ${json}")
endif()
file(READ "${json}" json_text)
string(REGEX MATCHALL "\"name\": \"[^\"]+\"" json_names "${json_text}")
list(LENGTH json_names json_count)
if(NOT json_count EQUAL count)
  message(FATAL_ERROR "JSON has ${json_count} results, the output ${count} lines")
endif()
message(STATUS "tensorkeep-bench smoke test: ${count} result lines parsed")
