#!/usr/bin/env bash
# Run a Slurm job step under the training-efficiency service: register the run, run the command,
# mark the run finished (exit code 0) or failed (anything else), and exit with the command's code.
#
#   #SBATCH ...
#   export TEFF_URL=http://teff.internal:8000 TEFF_API_KEY=... TEFF_RUN=/path/run.json
#   srun deploy/slurm/teff-run.sh python train.py
#
# TEFF_RUN is a RunCreate body (model, hardware, seq_len_tokens, global batch); the job's ids come
# from Slurm: scheduler_job_id slurm-$SLURM_JOB_ID, attempt $SLURM_RESTART_COUNT, cluster
# $SLURM_CLUSTER_NAME. Only task 0 talks to the service. The run id is exported as TEFF_RUN_ID; a
# training process using teff_client's integrations finds and resumes the same run by those ids.
# The service being down never fails the job: the hooks warn and the command runs all the same.
set -u
PYTHON="${TEFF_PYTHON:-python3}"
task="${SLURM_PROCID:-0}"

if [[ "$task" == "0" && -n "${TEFF_RUN:-}" ]]; then
    if run_id="$("$PYTHON" -m teff_client job begin --run "@${TEFF_RUN}")"; then
        export TEFF_RUN_ID="$run_id"
        echo "teff: run $TEFF_RUN_ID (job ${SLURM_JOB_ID:-?}, attempt ${SLURM_RESTART_COUNT:-0})" >&2
    else
        echo "teff: could not register the run; training goes on unreported by the wrapper" >&2
    fi
fi

"$@"
status=$?

if [[ "$task" == "0" && -n "${TEFF_RUN_ID:-}" ]]; then
    "$PYTHON" -m teff_client job end --run-id "$TEFF_RUN_ID" --exit-code "$status" >&2 \
        || echo "teff: could not mark run $TEFF_RUN_ID" >&2
fi
exit "$status"
