"""A stand-in worker process for the launcher's tests (``cluster/collective.py``): it does
what ``EXITING_WORKER`` says for its ``TF_CONFIG`` index, ``index:action,...`` with action
an exit code, ``kill`` (SIGKILL itself) or ``ok`` (worker 0 writes the outcome file)."""

import json
import os
import signal
import sys

from recsys_dist.cluster.collective import OUTCOME_FILE, RUN_FILE_ENV

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
action = dict(a.split(":") for a in os.environ["EXITING_WORKER"].split(","))[str(index)]
print(f"worker {index}: {action}", flush=True)
if action == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if action == "ok":
    if index == 0:
        with open(os.path.join(os.path.dirname(os.environ[RUN_FILE_ENV]), OUTCOME_FILE), "w") as f:
            json.dump({"already_complete": False, "step": 7}, f)
    sys.exit(0)
sys.exit(int(action))
