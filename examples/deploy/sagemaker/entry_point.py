#!/usr/bin/env python3
"""hvx's SageMaker entry point: run on every instance of a training job, it starts the job once.

SageMaker starts the image on every instance, minutes apart. This program is what it runs there,
in either of two ways:
  - bring-your-own-container: SageMaker runs `docker run IMAGE train`, which the Dockerfile's
    ENTRYPOINT makes `entry_point.py train`; the hyperparameters are read from
    /opt/ml/input/config/hyperparameters.json;
  - the SageMaker training toolkit's runner (an image whose `train` is the toolkit's console
    script, with sagemaker_program=entry_point.py): the toolkit runs it with the hyperparameters
    as `--name value` arguments, which some versions pass through a shell that splits values at
    spaces; they are read from the toolkit's SM_HPS instead, as the job was given them.
On every instance it starts sshd (the image's /etc/ssh, written by setup_ssh.sh) when the job has
more than one host, then runs hvxrun. hvxrun reads the hosts from the toolkit's SM_HOSTS and
SM_CURRENT_HOST or from /opt/ml/input/config/resourceconfig.json: on the first host it waits for
every other host to answer ssh (--host-wait, 30 min there by default), then starts one rank per
GPU on every host; on the others it waits until the ranks it was given have finished. Every
instance exits with the job's status.

The trainer gets each hyperparameter `name: value` as `--name=value` (config, override, max_steps,
sample_log, fresh, export, ...: `hvx-train --help`; an unknown name fails the job, naming it), and
  --data_dir=/opt/ml/input/data/training      the "training" channel, when there is one: the
                                              config's file names (train-*, validation-*) there
  --override=checkpoint { dir: "/opt/ml/checkpoints" }
                                              SageMaker keeps this folder with checkpoint_s3_uri
                                              and restores it, so a restarted (spot) job resumes
  --export=/opt/ml/model/model.pt             the weights, which SageMaker uploads at the end
before the hyperparameters, which may change each. `config` names a bundled config
(HVX_CONFIG_DIR, default /opt/hvx/configs) or a path; default fashion_mnist.pbtxt.

  entry_point.py [train]                      hyperparameters from hyperparameters.json
  entry_point.py --config imagenet.pbtxt ...  hyperparameters as arguments (the toolkit)
  entry_point.py -- PROGRAM [ARGS...]         any hvx program under hvxrun instead of the trainer

Environment: HVXRUN (default hvxrun), HVX_TRAIN (default hvx-train: the toolkit's console script
takes the name train), HVXRUN_ARGS (more hvxrun flags, as shell words, e.g. --timeout 86400),
HVX_SSHD (default /usr/sbin/sshd; "none" where the image starts sshd itself), HVX_SSHD_RUN_DIR
(default /run/sshd, the privilege separation folder Debian's sshd needs), SAGEMAKER_BASE_DIR
(default /opt/ml, as the toolkit), SM_CHANNEL_TRAINING and SM_MODEL_DIR (the toolkit's).

A job that fails leaves its reason in output/failure (hvxrun's --failure-file, or this program's
own error), which SageMaker shows as the job's FailureReason.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys

MPI_MODE_HELP = (
    "SageMaker's MPI mode (an estimator's distribution={'mpi': ...}, hyperparameter "
    "sagemaker_mpi_enabled) starts Open MPI's mpirun on the first instance and no entry point on "
    "the others; it cannot start hvx's MPICH ranks. Remove `distribution` from the estimator: this "
    "entry point runs on every instance and hvxrun starts the ranks itself "
    "(examples/deploy/sagemaker/estimator.py)."
)


class Error(Exception):
    pass


def base_dir():
    return os.environ.get("SAGEMAKER_BASE_DIR") or "/opt/ml"


def read_json(path):
    """The JSON object in `path`, or None when there is no such file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise Error(f"{path}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    if not isinstance(value, dict):
        raise Error(f"{path}: not a JSON object")
    return value


def decode_value(value):
    """A hyperparameter's value as the trainer's flag takes it. SageMaker stores every value as a
    string; Framework estimators store each JSON-encoded ("\\"imagenet.pbtxt\\""), as the toolkit
    reads them."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return value
        return decoded if isinstance(decoded, str) else value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def parse_arguments(args):
    """Hyperparameters given as `--name value` or `--name=value` arguments, in order (a name may
    repeat: override)."""
    pairs = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or arg == "--":
            raise Error(
                f"argument {i + 1} ({arg!r}) is not a hyperparameter name (--name value); "
                "run a program with: entry_point.py -- PROGRAM [ARGS...]"
            )
        if "=" in arg:
            name, value = arg[2:].split("=", 1)
        elif i + 1 < len(args):
            name, value = arg[2:], args[i + 1]
            i += 1
        else:
            raise Error(f"hyperparameter {arg} has no value")
        pairs.append((name, value))
        i += 1
    return pairs


def hyperparameters(args):
    toolkit = os.environ.get("SM_HPS")
    if args and toolkit:
        # The toolkit's runner passes the hyperparameters as arguments too, but some versions
        # join them with spaces and run them through a shell ("epochs: 90" arrives as two words,
        # quotes vanish); SM_HPS has them as the job was given them.
        try:
            values = json.loads(toolkit)
        except json.JSONDecodeError as e:
            raise Error(f"SM_HPS (the toolkit's hyperparameters) is not JSON: {e.msg}") from None
        if not isinstance(values, dict):
            raise Error("SM_HPS (the toolkit's hyperparameters) is not a JSON object")
        pairs = [(k, decode_value(v)) for k, v in values.items()]
    elif args:
        pairs = parse_arguments(args)
    else:
        path = os.path.join(base_dir(), "input/config/hyperparameters.json")
        pairs = [(k, decode_value(v)) for k, v in (read_json(path) or {}).items()]
    mine = []
    for name, value in pairs:
        if name == "sagemaker_mpi_enabled" and str(value).lower() == "true":
            raise Error(MPI_MODE_HELP)
        if name.startswith("sagemaker_"):
            continue  # the SDK's and the toolkit's own (sagemaker_program, ...)
        if not name or name.startswith("-"):
            raise Error(f"bad hyperparameter name {name!r}")
        mine.append((name, value))
    return mine


def host_count():
    """How many instances the job has (1 when it cannot tell: hvxrun then says what is wrong)."""
    if os.environ.get("SM_HOSTS"):
        try:
            return len(json.loads(os.environ["SM_HOSTS"]))
        except (json.JSONDecodeError, TypeError):
            return 1
    config = read_json(os.path.join(base_dir(), "input/config/resourceconfig.json"))
    hosts = (config or {}).get("hosts")
    return len(hosts) if isinstance(hosts, list) else 1


def start_sshd():
    sshd = os.environ.get("HVX_SSHD", "/usr/sbin/sshd")
    if sshd == "none":
        return
    run_dir = os.environ.get("HVX_SSHD_RUN_DIR", "/run/sshd")  # its privilege separation folder
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as e:
        raise Error(f"cannot make {run_dir} for {sshd}: {e}") from None
    # sshd detaches once it listens: an error (no host key, the port taken) is reported here.
    done = subprocess.run([sshd], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        raise Error(
            f"{sshd} did not start (exit {done.returncode}): {done.stderr.strip()}; the other "
            "instances reach this one through it (the image's /etc/ssh: setup_ssh.sh)"
        )


def program(path_or_name, what):
    found = shutil.which(path_or_name)
    if not found:
        raise Error(f"{what} {path_or_name!r} is not a program on PATH")
    return os.path.abspath(found)


def trainer_command(params):
    base = base_dir()
    names = [name for name, _ in params]
    config = dict(params).get("config", "fashion_mnist.pbtxt")
    bundled = os.path.join(os.environ.get("HVX_CONFIG_DIR", "/opt/hvx/configs"), config)
    if "/" not in config and os.path.isfile(bundled):
        config = bundled
    command = [program(os.environ.get("HVX_TRAIN", "hvx-train"), "HVX_TRAIN"), f"--config={config}"]
    data = os.environ.get("SM_CHANNEL_TRAINING") or os.path.join(base, "input/data/training")
    if "data_dir" not in names and os.path.isdir(data):
        command.append(f"--data_dir={data}")
    checkpoints = os.path.join(base, "checkpoints")
    command.append(f'--override=checkpoint {{ dir: "{checkpoints}" }}')
    if "export" not in names:
        model = os.environ.get("SM_MODEL_DIR") or os.path.join(base, "model")
        command.append(f"--export={os.path.join(model, 'model.pt')}")
    command += [f"--{name}={value}" for name, value in params if name != "config"]
    return command


def main(argv):
    args = argv[1:]
    if args[:1] == ["train"]:
        args = args[1:]  # `docker run IMAGE train` through the ENTRYPOINT
    if os.environ.get("OMPI_COMM_WORLD_SIZE"):
        raise Error(MPI_MODE_HELP)
    if args[:1] == ["--"]:
        if len(args) < 2:
            raise Error("-- needs a program")
        command = args[1:]
    else:
        command = trainer_command(hyperparameters(args))
    hvxrun = program(os.environ.get("HVXRUN", "hvxrun"), "HVXRUN")
    extra = shlex.split(os.environ.get("HVXRUN_ARGS", ""))
    if host_count() > 1:
        start_sshd()
    sys.stdout.flush()
    # SageMaker shows what a failed job leaves in output/failure as its reason.
    failure = ["--failure-file", failure_file()]
    os.execv(hvxrun, [hvxrun] + failure + extra + ["--"] + command)


def failure_file():
    return os.path.join(base_dir(), "output/failure")


if __name__ == "__main__":
    try:
        main(sys.argv)
    except Error as e:
        print(f"entry_point.py: {e}", file=sys.stderr)
        try:
            os.makedirs(os.path.dirname(failure_file()), exist_ok=True)
            with open(failure_file(), "w", encoding="utf-8") as f:
                f.write(f"entry_point.py: {e}"[:1024] + "\n")
        except OSError:
            pass
        sys.exit(2)
