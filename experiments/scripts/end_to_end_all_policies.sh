#!/usr/bin/env bash
# End-to-end, all policies: the 18-policy tables with the current default calibration (see README.md).
# Run from the repository root with the project's venv active; ~10 min on 2 cores.
set -euo pipefail
OUT=${OUT:-results/end-to-end/all-policies}
# --suite all without vertumnus-adaptive (the controller of issue #4 is being reworked and takes
# ~45 s per 650 requests at the time of writing)
ALL=round-robin,random,least-work,prefix-affinity,vertumnus,vertumnus-lambda0,vertumnus-beta1,vertumnus-no-reservation,vertumnus-length-only,homogeneous-cp2,homogeneous-cp4,static-threshold,vllm-tp4,sglang-cache-aware,llm-d,dynamo-kv,mooncake-ttft,vertumnus-global-cache
cpgym compare --trace ../shared/data/traces/conversation_trace.jsonl --rates 4,8,12,16,20 --suite "$ALL" --jobs 2 --out "$OUT/conversation"
cpgym compare --workload tool-agent --window-s 0 120 --rates 40,55,70 --suite "$ALL" --jobs 2 --out "$OUT/tool-agent"
cpgym compare --workload leval-like --window-s 0 120 --rates 20,35,50,65,80 --suite "$ALL" --jobs 2 --out "$OUT/leval-like"
