#!/usr/bin/env bash
# GPU proof: build Horovod 0.28.1 with CUDA + NCCL on one CUDA machine, driven by envtool's
# own flag derivation (`envtool create specs/local-gpu-nccl.yaml`), then check it:
# `horovodrun --check-build` parsed by `envtool check-build`, and a 1-rank NCCL allreduce of a
# CUDA tensor (NCCL_DEBUG=INFO and a Horovod timeline show that NCCL did the work).
#
# Made for a machine with no network (docs/gpu-proof.md): run from the repository root with
#   CARRY=<dir holding horovod-0.28.1.tar.gz, cffi/pycparser wheels, envtool-deps/>  (default ./.carry)
#   OUT=<dir for logs; at most 8 files land there>   (default /tmp/gpu-proof)
#   PY=<python with CUDA torch>                      (default python3)
#   SPEC=<spec file>  PREFIX=<target prefix>         (default specs/local-gpu-nccl.yaml, /tmp/envs/local-gpu-nccl)
#   FIXES="<fix ids>"   fixes applied before the first attempt (cmake4-policy gcc13-includes
#                       distutils-shim nvcc-cxx17); MAX_ATTEMPTS (default 4); SITE_SHIM=0 to skip the shim
# Offline pip: PIP_NO_INDEX=1, PIP_FIND_LINKS=$CARRY. The device's own site-packages (torch,
# setuptools, psutil, …) are made visible to the new venv's pip through PYTHONPATH (a CUDA torch
# wheel cannot be carried) and to the finished venv through a .pth shim (envtool-device-site),
# because the venv engine has no --system-site-packages option.
#
# If `envtool create` fails, the log is matched against known breakages; each match adds one
# fix (an environment variable or a wrapper) and create runs again (at most $MAX_ATTEMPTS). The
# fixes applied are printed as "FIX <id> applied" lines and listed in $OUT/summary.txt.
# Exit status: 0 when create succeeded and the check-build comparison and the NCCL allreduce
# passed, 1 otherwise.
set -u
REPO=$(pwd)
CARRY=${CARRY:-$REPO/.carry}
OUT=${OUT:-/tmp/gpu-proof}
PY=${PY:-python3}
SPEC=${SPEC:-specs/local-gpu-nccl.yaml}
PREFIX=${PREFIX:-/tmp/envs/local-gpu-nccl}
MAX_ATTEMPTS=${MAX_ATTEMPTS:-4}
SCRATCH=${SCRATCH:-/tmp/envtool-gpu-scratch}
L=$SCRATCH/logs        # every log; copied to $OUT at exit (the device tool brings back 8 files at most)
rm -rf "$L"; mkdir -p "$OUT" "$L"
SUMMARY=$L/summary.txt
pack() {
  for f in summary.txt probe.txt checkbuild.txt checkbuild.json allreduce.log; do
    [ -f "$L/$f" ] && cp "$L/$f" "$OUT/"
  done
  last=$(ls -t "$L"/create*.log 2>/dev/null | head -1); [ -n "$last" ] && cp "$last" "$OUT/"
  tar -czf "$OUT/gpu-proof-logs.tar.gz" -C "$L" . 2>/dev/null
}
trap pack EXIT
: >"$SUMMARY"
say() { echo "== $*" | tee -a "$SUMMARY" >&2; }
T0=$SECONDS

# ---------------------------------------------------------------- 0. what the machine holds
{
  echo "# date: $(date -u +%FT%TZ)  host: $(uname -srm)"
  $PY - <<'EOF'
import sys, torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "cc", torch.cuda.get_device_capability(0))
    print("torch nccl", torch.cuda.nccl.version())
EOF
  echo "# nvcc: $(command -v nvcc || echo none)"; nvcc --version 2>&1 | tail -2
  echo "# cmake: $(command -v cmake || echo none) $(cmake --version 2>&1 | head -1)"
  echo "# c++: $(c++ --version 2>&1 | head -1)"
  for t in mpicxx mpicc mpirun mpiexec; do echo "# $t: $(command -v $t || echo none)"; done
  echo "# mpi.h: $(find /usr/include /usr/lib /usr/local /opt -name mpi.h 2>/dev/null | head -3 | tr '\n' ' ')"
  ls -d /usr/local/cuda* 2>/dev/null | sed 's/^/# cuda dir: /'
  $PY -m pip list 2>/dev/null | grep -iE '^(torch|nvidia-nccl|cffi|pycparser|psutil|cloudpickle|pyyaml|packaging|setuptools|wheel|mpi4py|cmake|pip) ' \
    | sed 's/^/# pip: /'
  echo "# ensurepip: $($PY -c 'import ensurepip; print(ensurepip.version())' 2>&1)"
  cat "$(dirname "$(dirname "$($PY -c 'import sys; print(sys.executable)')")")/pyvenv.cfg" 2>/dev/null | sed 's/^/# pyvenv.cfg: /'
  nvidia-smi -L 2>&1 | head -2
} >"$L/probe.txt" 2>&1
cat "$L/probe.txt" >&2

# ---------------------------------------------------------------- 1. NCCL from the pip wheel
# nvidia-nccl-cu13 ships include/nccl.h and lib/libnccl.so.2 but no unversioned libnccl.so,
# which CMake's find_library(NAMES nccl) needs: link both into the spec's horovod.nccl_home.
$PY -m envtool plan "$SPEC" --prefix "$PREFIX" --json >"$L/plan.json" 2>&1
NCCL_HOME=$($PY -c 'import json, sys
plan = json.load(open(sys.argv[1]))
print(next((s["env"].get("HOROVOD_NCCL_HOME", "") for s in plan["steps"] if s["id"] == "build-horovod"), ""))' "$L/plan.json")
NCCL_PKG=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
if [ -n "$NCCL_HOME" ] && [ -n "$NCCL_PKG" ]; then
  mkdir -p "$NCCL_HOME/lib"
  ln -sfn "$NCCL_PKG/include" "$NCCL_HOME/include"
  for f in "$NCCL_PKG"/lib/libnccl*; do ln -sf "$f" "$NCCL_HOME/lib/"; done
  [ -e "$NCCL_HOME/lib/libnccl.so" ] || ln -sf "$NCCL_PKG/lib/libnccl.so.2" "$NCCL_HOME/lib/libnccl.so"
  say "NCCL home $NCCL_HOME -> $NCCL_PKG ($(grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$NCCL_PKG/include/nccl.h" | awk '{print $3}' | paste -sd.))"
  ls -l "$NCCL_HOME" "$NCCL_HOME/lib" >&2
else
  say "no nccl_home in $SPEC or no nvidia.nccl package (NCCL_PKG='$NCCL_PKG')"
fi

# ---------------------------------------------------------------- 2. offline pip, device site
TORCH_SITE=$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
export PYTHONPATH=$TORCH_SITE${PYTHONPATH:+:$PYTHONPATH}
# envtool's own dependencies that the machine lacks (conda-lock and its needs, for the lock step):
# carried as wheels in $CARRY/envtool-deps, installed into a scratch folder behind the device's.
if [ -d "$CARRY/envtool-deps" ] && ! $PY -c 'import conda_lock' 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$SCRATCH/envtool-deps" "$CARRY"/envtool-deps/*.whl >&2 \
    && export PYTHONPATH=$PYTHONPATH:$SCRATCH/envtool-deps
fi
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$CARRY PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
# PYTHONPATH lets the new venv's pip see torch as installed, but envtool's validation rightly runs
# without PYTHONPATH (the environment must stand alone). The venv engine has no
# --system-site-packages option, so a one-file wheel, envtool-device-site, puts a .pth naming the
# device's site-packages into the venv; PIP_REQUIREMENT adds it to every pip install/wheel.
if [ "${SITE_SHIM:-1}" = 1 ]; then
  mkdir -p "$SCRATCH/site-shim"
  $PY - "$SCRATCH/site-shim" "$TORCH_SITE" <<'EOF2'
import base64, hashlib, sys, zipfile
out, site = sys.argv[1], sys.argv[2]
name, ver = "envtool_device_site", "1.0"
files = {
    # addsitedir, not a bare path: the .pth files there (setuptools' distutils-precedence.pth)
    # must run too, as they do for --system-site-packages.
    "envtool_device_site.pth": f"import site; site.addsitedir({site!r})\n",
    f"{name}-{ver}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: envtool-device-site\nVersion: {ver}\n"
                                        "Summary: .pth naming the device's site-packages (gpu_proof.sh)\n",
    f"{name}-{ver}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: gpu_proof.sh\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for path, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(text.encode())}")
record.append(f"{name}-{ver}.dist-info/RECORD,,")
files[f"{name}-{ver}.dist-info/RECORD"] = "\n".join(record) + "\n"
with zipfile.ZipFile(f"{out}/{name}-{ver}-py3-none-any.whl", "w") as zf:
    for path, text in files.items():
        zf.writestr(path, text)
open(f"{out}/requirements.txt", "w").write("envtool-device-site==1.0\n")
EOF2
  export PIP_FIND_LINKS="$CARRY $SCRATCH/site-shim" PIP_REQUIREMENT=$SCRATCH/site-shim/requirements.txt
  say "site shim: envtool-device-site (.pth -> $TORCH_SITE) added to every pip install through PIP_REQUIREMENT"
fi
export ENVTOOL_CACHE_DIR=${ENVTOOL_CACHE_DIR:-$SCRATCH/cache}
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
$PY -m envtool plan "$SPEC" --prefix "$PREFIX" >&2

# ---------------------------------------------------------------- 3. create, with known fixes
APPLIED=""
apply_fix() {  # $1 = fix id; sets up the fix in this shell; returns 1 if already applied
  case " $APPLIED " in *" $1 "*) return 1 ;; esac
  APPLIED="$APPLIED $1"
  case "$1" in
    cmake4-policy)
      # CMake >= 4.0 refuses cmake_minimum_required(VERSION < 3.5) (third_party/gloo asks 2.8.12).
      export CMAKE_POLICY_VERSION_MINIMUM=3.5 ;;
    nvcc-cxx17)
      # CUDA 13's headers (CCCL) need C++17; Horovod 0.28.1 sets CMAKE_CUDA_STANDARD 11 for
      # cuda_kernels.cu. HOROVOD_CUDA_HOME/bin/nvcc becomes CMAKE_CUDA_COMPILER: a wrapper there
      # rewrites -std=c++11/14 to c++17.
      mkdir -p "$SCRATCH/nvcc17/bin"
      real=$(command -v nvcc)
      cat >"$SCRATCH/nvcc17/bin/nvcc" <<EOF
#!/bin/sh
# gpu_proof fix nvcc-cxx17: Horovod <= 0.28.1 compiles cuda_kernels.cu as C++11; CUDA >= 13 needs C++17.
for arg in "\$@"; do
  shift
  case "\$arg" in
    -std=c++11|-std=c++14|--std=c++11|--std=c++14) set -- "\$@" -std=c++17 ;;
    *) set -- "\$@" "\$arg" ;;
  esac
done
exec "$real" "\$@"
EOF
      chmod +x "$SCRATCH/nvcc17/bin/nvcc"
      export HOROVOD_CUDA_HOME=$SCRATCH/nvcc17 ;;
    gcc13-includes)
      # gcc >= 13's libstdc++ no longer includes <string>, <stdexcept>, <cstdint> transitively;
      # Horovod 0.28.1's group_table.h / common.h rely on that (horovod #3957, master only).
      # CMake takes CXXFLAGS from the environment into CMAKE_CXX_FLAGS.
      export CXXFLAGS="${CXXFLAGS:-} -include cstdint -include string -include stdexcept" ;;
    distutils-shim)
      # horovod/torch/CMakeLists.txt@v0.28.1 asks `from distutils.sysconfig import get_python_inc`;
      # Python >= 3.12 has no distutils. setuptools' shim is enabled by its distutils-precedence.pth,
      # which Python reads only in site directories, not in PYTHONPATH entries (this script's
      # way of showing the device's site-packages): expose setuptools/_distutils as distutils.
      mkdir -p "$SCRATCH/distutils-shim"
      ln -sfn "$TORCH_SITE/setuptools/_distutils" "$SCRATCH/distutils-shim/distutils"
      export PYTHONPATH=$SCRATCH/distutils-shim:$PYTHONPATH ;;
  esac
  say "FIX $1 applied"
}
match_fixes() {  # $1 = log; prints fix ids that match
  local log=$1
  grep -q 'Compatibility with CMake < 3.5 has been removed' "$log" && echo cmake4-policy
  if grep -qE 'requires at least C\+\+ ?17|C\+\+17 or later|requires C\+\+17' "$log" \
     && grep -qE 'cuda_kernels\.cu|horovod_cuda_kernels\.dir' "$log"; then echo nvcc-cxx17; fi
  grep -qE "is not a member of .std.|in namespace .std. does not name a type|did you forget to .#include <|'u?int(8|16|32|64)_t' (was not declared|does not name a type)" "$log" && echo gcc13-includes
  grep -q "No module named 'distutils'" "$log" && echo distutils-shim
  true
}
CREATED=0
for fix in ${FIXES:-}; do apply_fix "$fix"; done   # fixes known from earlier runs, applied up front
for attempt in $(seq 1 "$MAX_ATTEMPTS"); do
  log=$L/create$attempt.log
  say "attempt $attempt: envtool create $SPEC --prefix $PREFIX (fixes:${APPLIED:- none}) at $((SECONDS - T0)) s"
  left=$((560 - (SECONDS - T0)))
  [ $left -gt 60 ] || { say "no time left for attempt $attempt"; break; }
  timeout $left $PY -m envtool -v create "$SPEC" --prefix "$PREFIX" --force --json >"$L/create$attempt.json" 2>"$log"
  rc=$?
  say "attempt $attempt: exit $rc at $((SECONDS - T0)) s"
  if [ $rc -eq 0 ]; then CREATED=1; break; fi
  grep -nE 'error|Error|FAILED|fatal' "$log" | grep -v 'Werror\|error_code\|-Wno-error' | head -25 | tee -a "$SUMMARY" >&2
  new=0
  for fix in $(match_fixes "$log"); do apply_fix "$fix" && new=1; done
  [ $new -eq 1 ] || { say "no known fix matches attempt $attempt's failure; stopping"; break; }
done

# ---------------------------------------------------------------- 4. checks
HVD_PY=$PREFIX/bin/python
HVDRUN=$PREFIX/bin/horovodrun
if [ $CREATED -ne 1 ]; then
  wheel=$(ls "$ENVTOOL_CACHE_DIR"/horovod-wheels/*/horovod-*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ]; then
    say "create failed but a built wheel is cached ($wheel): installing it with --target for the checks"
    $PY -m pip install -q --no-deps --target "$SCRATCH/hvd-site" "$wheel" >&2
    export PYTHONPATH=$SCRATCH/hvd-site:$PYTHONPATH
    HVD_PY=$PY; HVDRUN="$PY $SCRATCH/hvd-site/bin/horovodrun"
  else
    say "no Horovod was built; nothing to check"; exit 1
  fi
fi
$HVDRUN --check-build >"$L/checkbuild.txt" 2>&1
cat "$L/checkbuild.txt" >&2
$PY -m envtool check-build --from-file "$L/checkbuild.txt" --spec "$SPEC" --json >"$L/checkbuild.json"
CB=$?
if [ $CREATED -eq 1 ]; then
  $PY -m envtool check-build --prefix "$PREFIX" --spec "$SPEC" >"$L/checkbuild-live.txt" 2>&1
  say "envtool check-build --prefix $PREFIX --spec: exit $? ($(tr '\n' ' ' <"$L/checkbuild-live.txt" | head -c 300))"
fi
say "envtool check-build --from-file --spec: exit $CB"

cat >"$SCRATCH/nccl_probe.py" <<'EOF'
import json, time, torch, horovod.torch as hvd
hvd.init()
torch.cuda.set_device(hvd.local_rank())
out = {"rank": hvd.rank(), "size": hvd.size(), "nccl_built": hvd.nccl_built(), "cuda_built": hvd.cuda_built(),
       "gloo_enabled": hvd.gloo_enabled()}
t = torch.full((4,), float(hvd.rank() + 1), device="cuda")
r = hvd.allreduce(t, name="gpu_proof.small", op=hvd.Sum)
torch.cuda.synchronize()
out.update(device=str(r.device), value=r.tolist())
big = torch.ones(64 * 1024 * 1024 // 4, device="cuda")  # 64 MiB of float32
hvd.allreduce(big, name="gpu_proof.big.warmup", op=hvd.Sum); torch.cuda.synchronize()
t0 = time.perf_counter()
for i in range(10):
    s = hvd.allreduce(big, name=f"gpu_proof.big.{i}", op=hvd.Sum)
torch.cuda.synchronize()
out["allreduce_64MiB_mean_s"] = (time.perf_counter() - t0) / 10
out["big_ok"] = bool(torch.all(s == hvd.size()).item())
print("RESULT " + json.dumps(out), flush=True)
EOF
NCCL_DEBUG=INFO HOROVOD_TIMELINE=$L/timeline.json timeout 180 \
  $HVDRUN -np 1 -H localhost:1 --gloo $HVD_PY "$SCRATCH/nccl_probe.py" >"$L/allreduce.log" 2>&1
AR=$?
grep -E 'RESULT|NCCL INFO (NCCL version|comm |Init COMPLETE|cudaDriverVersion)|Error|error' "$L/allreduce.log" | head -20 >&2
NCCL_OPS=$(grep -c 'NCCL_ALLREDUCE' "$L/timeline.json" 2>/dev/null); NCCL_OPS=${NCCL_OPS:-0}
say "1-rank NCCL allreduce: exit $AR; timeline lines naming NCCL_ALLREDUCE: $NCCL_OPS"
grep -q '"nccl_built": [1-9]' "$L/allreduce.log" && grep -q '"big_ok": true' "$L/allreduce.log" \
  && grep -q 'NCCL INFO' "$L/allreduce.log" && [ "$NCCL_OPS" -gt 0 ] && AR_OK=1 || AR_OK=0

# Two ranks on the one GPU: NCCL refuses two ranks of one communicator on one device; recorded, not required.
if [ $((SECONDS - T0)) -lt 480 ]; then
  sed -i 's/torch.cuda.set_device(hvd.local_rank())/torch.cuda.set_device(0)/' "$SCRATCH/nccl_probe.py"
  NCCL_DEBUG=WARN timeout 90 $HVDRUN -np 2 -H localhost:2 --gloo $HVD_PY "$SCRATCH/nccl_probe.py" >"$L/allreduce2.log" 2>&1
  say "2 ranks on one GPU: exit $? ($(grep -m1 -oE 'Duplicate GPU detected[^\"]*|RESULT.*' "$L/allreduce2.log" | head -c 200))"
fi
say "fixes applied:${APPLIED:- none}; created=$CREATED check-build=$CB allreduce_ok=$AR_OK; total $((SECONDS - T0)) s"
[ $CREATED -eq 1 ] && [ $CB -eq 0 ] && [ $AR_OK -eq 1 ]
