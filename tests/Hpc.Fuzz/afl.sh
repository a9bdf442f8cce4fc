#!/usr/bin/env bash
# Coverage-guided fuzzing of one target with AFL++ and SharpFuzz (docs/fuzzing.md):
#   tests/Hpc.Fuzz/afl.sh TARGET [SECONDS] [OUT]      TARGET: resp | manifest | agent-frames
# Builds the targets into a folder of their own, instruments the product assemblies there, starts from the corpus in
# the repository and stops after SECONDS (default 600). Crashes and hangs land in OUT/default/{crashes,hangs}; each
# crash is replayed at the end, so the line that reports it names the exception.
set -euo pipefail
target=${1:?usage: afl.sh resp|manifest|agent-frames [SECONDS] [OUT]}
seconds=${2:-600}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${3:-$root/artifacts/fuzz/$target}
command -v afl-fuzz >/dev/null || { echo "afl.sh: afl-fuzz not found (apt-get install afl++)" >&2; exit 2; }
tools=$root/artifacts/fuzz/tools
[ -x "$tools/sharpfuzz" ] || dotnet tool install SharpFuzz.CommandLine --tool-path "$tools" >/dev/null
bin=$root/artifacts/fuzz/bin
rm -rf "$bin"   # instrumenting is done in place, once per build
dotnet publish "$root/tests/Hpc.Fuzz/Hpc.Fuzz.csproj" -c Release -o "$bin" -nologo -v q
for assembly in Hpc.CacheHost.dll Hpc.CommonData.Core.dll; do "$tools/sharpfuzz" "$bin/$assembly" >/dev/null; done
mkdir -p "$out"
# dotnet itself carries no AFL instrumentation (the assemblies do, through SharpFuzz); no core dumps or CPU governor here.
AFL_SKIP_BIN_CHECK=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_SKIP_CPUFREQ=1 AFL_NO_UI=1 \
  afl-fuzz -i "$root/tests/Hpc.Fuzz/corpus/$target" -o "$out" -t 10000 -m none -V "$seconds" -- dotnet "$bin/Hpc.Fuzz.dll" "$target" \
  >"$out/afl.log" 2>&1 || { tail -20 "$out/afl.log"; exit 1; }
grep -E "^(execs_done|execs_per_sec|corpus_count|saved_crashes|saved_hangs|bitmap_cvg|run_time)" "$out/default/fuzzer_stats"
crashes=$(find "$out/default/crashes" -type f -name 'id:*' | wc -l)
if [ "$crashes" -gt 0 ]; then dotnet "$bin/Hpc.Fuzz.dll" "$target" --replay "$out/default/crashes"; exit 1; fi
