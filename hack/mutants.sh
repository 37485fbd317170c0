#!/usr/bin/env bash
# Runs cargo-mutants over parts of the pure core, and over the decisions that sit beside I/O (part shell), and keeps
# each part's summary in docs/mutants/<part>.md (the commit it was measured on, caught / missed / unviable /
# timeouts, the score per module, every missed mutant) and its mutants by name in docs/mutants/<part>.outcomes.txt.
#
#   hack/mutants.sh [PART ...]     parts: core registry node agent crio pull cli shell (default: all eight, in one run)
#   MUTANTS_JOBS=2 hack/mutants.sh  builds and tests two mutants at once (each in its own copy of the tree)
#   MUTANTS_SUMMARISE_ONLY=1 [MUTANTS_RUN=<parts+...>] hack/mutants.sh [PART ...]
#                                   writes the summaries of the last run of those parts (or of the run named) again,
#                                   after a reason was added to docs/mutants/equivalent.txt
#
# The parts named are one cargo-mutants run (one baseline build), summarised part by part. A part takes 5 to 35
# minutes on 2 cores (docs/development.md); the full report of a run stays in target/mutants/<parts>/mutants.out.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
version=27.1.0

files_of() {
  case $1 in
    core) echo "src/hosting/*.rs src/publish/*.rs src/keys.rs src/settings.rs src/watching.rs" ;;
    registry) echo "src/registry/*.rs" ;;
    node) echo "src/node/*.rs src/node/api/*.rs src/kube_proxy/*.rs" ;;
    agent) echo "src/agent/state.rs src/agent/runtime/containerd/*.rs" ;;
    crio) echo "src/agent/runtime/crio/*.rs" ;;
    pull) echo "src/pull/*.rs" ;;
    cli) echo "src/cli/doctor/judge.rs src/cli/nodes/judge.rs src/cli/nodes/verdict.rs src/cli/nodes/proxy.rs src/cli/readers.rs src/cli/controllers/mod.rs" ;;
    shell) echo "src/escape.rs src/health.rs src/selector.rs src/config/mod.rs src/cli/mod.rs src/events.rs src/agent/mod.rs src/metrics_auth.rs" ;;
    *) echo "hack/mutants.sh: unknown part '$1' (core, registry, node, agent, crio, pull, cli, shell)" >&2; return 2 ;;
  esac
}

# The decisions a part takes from files that also do I/O (the shell's): a regexp over mutant names (`replace X` /
# `in X`, X a function or Type::method) per file, as `file|functions`; a file not listed is taken whole.
functions_of() {
  case $1 in
    shell)
      echo "src/config/mod.rs|parse_[a-z_]+"
      echo "src/cli/mod.rs|published_status|invoked_as_plugin"
      echo "src/events.rs|same|digest|posting_order|event|Keyed::of|Tell::occurrence|Latest<N>::put"
      echo "src/agent/mod.rs|sync|News::of|read_plan|moved|Following::on|Following::read"
      echo "src/metrics_auth.rs|Memory::spend|bearer_token"
      ;;
  esac
}

# The mutants a part tests, as a regexp over cargo-mutants' mutant names (`<file>:<line>:<col>: <change>`).
names_regexp() {
  local part=$1 regexp="" f rule functions
  for f in $(files_of "$part"); do
    rule=$(functions_of "$part" | awk -F'|' -v f="$f" '$1 == f')
    f=${f//./\\.}
    f=${f//\*/[^/]*}
    if [ -n "$rule" ]; then
      functions=${rule#*|}
      regexp+="${regexp:+|}^$f:[0-9]+:[0-9]+: .*(replace|in) ($functions)( |$)"
    else
      regexp+="${regexp:+|}^$f:"
    fi
  done
  echo "$regexp"
}

summarise() {
  local part=$1 out=$2 run=$3
  local outcomes="$out/mutants.out/outcomes.json" regexp commit jobs minutes
  # By name, not by file: cargo-mutants 27.1 applies --re to every mutant but its struct-field deletions.
  regexp=$(names_regexp "$part")
  commit=$(cat "$out/commit")
  jobs=$(cat "$out/jobs")
  minutes=$(jq -r '((.end_time | sub("\\.[0-9]+Z$"; "Z") | fromdate) - (.start_time | sub("\\.[0-9]+Z$"; "Z") | fromdate)) / 60 | floor' "$outcomes")
  mkdir -p docs/mutants
  {
    echo "# Mutation testing: $part"
    echo
    echo "Written by \`hack/mutants.sh $part\` (cargo-mutants $version, the library's unit, property and grammar tests) on commit"
    echo "\`$commit\`, $(jq -r '.start_time[:10]' "$outcomes"), in one run of \`$run\` that took $minutes minutes"
    echo "(\`MUTANTS_JOBS=$jobs\`). Files: \`$(files_of "$part")\`."
    if [ -n "$(functions_of "$part")" ]; then
      echo
      echo "Of these files' functions only the decisions (the rest is I/O, proven against the control plane):"
      functions_of "$part" | while IFS='|' read -r file functions; do echo "- \`$file\`: \`${functions//|/\`, \`}\`"; done
    fi
    echo
    echo "| module | mutants | caught | missed | timeouts | unviable | score |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    jq -r '
      [.outcomes[] | select(.scenario | type == "object") | select(.scenario.Mutant.name | test($names))
        | {file: .scenario.Mutant.file, summary}]
      | group_by(.file)[]
      | {file: .[0].file,
         total: length,
         caught: map(select(.summary == "CaughtMutant")) | length,
         missed: map(select(.summary == "MissedMutant")) | length,
         timeout: map(select(.summary == "Timeout")) | length,
         unviable: map(select(.summary == "Unviable")) | length}
      | . + {score: (if (.caught + .missed + .timeout) == 0 then "-" else
          "\((1000 * (.caught + .timeout) / (.caught + .missed + .timeout) | floor) / 10) %" end)}
      | "| `\(.file)` | \(.total) | \(.caught) | \(.missed) | \(.timeout) | \(.unviable) | \(.score) |"' \
      --arg names "$regexp" "$outcomes"
    echo
    echo "Score: (caught + timeouts) / (caught + missed + timeouts); unviable mutants do not build and count for nothing."
    echo
    echo "## Missed"
    echo
    echo "Each with why it is left, from docs/mutants/equivalent.txt (\`<mutant name> | why\`, kept by hand):"
    echo
    local name why any=0
    while IFS= read -r name; do
      any=1
      why=$(awk -F' [|] ' -v n="$name" '$1 == n { print $2; exit }' docs/mutants/equivalent.txt 2>/dev/null)
      echo "- \`$name\`: ${why:-NOT EXPLAINED: kill it with a test, or say why it is equivalent}"
    done < <(jq -r --arg names "$regexp" '.outcomes[] | select(.summary == "MissedMutant")
      | select(.scenario.Mutant.name | test($names)) | .scenario.Mutant.name' "$outcomes")
    [ $any = 1 ] || echo "None."
    echo
    echo "Every mutant of the part by name, with its outcome: docs/mutants/$part.outcomes.txt."
  } >"docs/mutants/$part.md"
  jq -r --arg names "$regexp" '.outcomes[] | select(.scenario | type == "object")
    | select(.scenario.Mutant.name | test($names)) | "\(.summary) | \(.scenario.Mutant.name)"' "$outcomes" \
    | sort >"docs/mutants/$part.outcomes.txt"
  echo "[mutants] $part: docs/mutants/$part.md" >&2
}

main() {
  local parts=("$@") part args=() commit run status=0 names=""
  [ ${#parts[@]} -gt 0 ] || parts=(core registry node agent crio pull cli shell)
  for part in "${parts[@]}"; do
    files_of "$part" >/dev/null
    for f in $(files_of "$part"); do args+=(--file "$f"); done
    names+="${names:+|}$(names_regexp "$part")"
  done
  args+=(--re "$names")
  local mutants; mutants="$(hack/cargo-tool.sh cargo-mutants "$version")"
  commit=$(git rev-parse HEAD)
  git diff --quiet HEAD -- src || echo "[mutants] src/ has uncommitted changes: the summary names $commit all the same" >&2
  run=$(IFS=+; echo "${parts[*]}")
  if [ -n "${MUTANTS_SUMMARISE_ONLY:-}" ]; then
    run=${MUTANTS_RUN:-$run}
    for part in "${parts[@]}"; do summarise "$part" "target/mutants/$run" "$run"; done
    return
  fi
  echo "[mutants] $run: ${args[*]}" >&2
  mkdir -p "target/mutants/$run"
  echo "$commit" >"target/mutants/$run/commit"
  echo "${MUTANTS_JOBS:-1}" >"target/mutants/$run/jobs"
  # Exit 2 means mutants were missed, 3 that some timed out: the summaries say which.
  "$mutants" mutants -p local-registry-publisher "${args[@]}" \
    --exclude '*/fixtures.rs' --exclude '*/tests.rs' --exclude '*/grammar_tests.rs' \
    --jobs "${MUTANTS_JOBS:-1}" --cargo-arg=--lib --output "target/mutants/$run" || status=$?
  case $status in 0 | 2 | 3) ;; *) echo "[mutants] $run: cargo-mutants failed ($status)" >&2; exit "$status" ;; esac
  for part in "${parts[@]}"; do
    summarise "$part" "target/mutants/$run" "$run"
  done
}

main "$@"
