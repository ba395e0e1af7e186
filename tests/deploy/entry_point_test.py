#!/usr/bin/env python3
"""examples/deploy/sagemaker/entry_point.py without SageMaker: how hyperparameters (from
hyperparameters.json or from the toolkit's arguments) become the trainer's flags, what it refuses,
and the hvxrun command it execs (HVXRUN=/bin/echo prints it).
  entry_point_test.py ENTRY_POINT"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

ENTRY = os.path.abspath(sys.argv.pop(1))
spec = importlib.util.spec_from_file_location("entry_point", ENTRY)
ep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ep)


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.base = self.dir.name
        os.makedirs(os.path.join(self.base, "input/config"))
        self.env = dict(os.environ)
        for name in list(os.environ):
            if name.startswith(("SM_", "HVX", "OMPI_")):
                del os.environ[name]
        os.environ["SAGEMAKER_BASE_DIR"] = self.base
        os.environ["HVX_TRAIN"] = "/bin/true"
        os.environ["HVX_CONFIG_DIR"] = os.path.join(self.base, "configs")

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.env)
        self.dir.cleanup()

    def write(self, name, text):
        path = os.path.join(self.base, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path


class HyperparameterTest(Base):
    def test_values_as_sagemaker_stores_them(self):
        self.assertEqual(ep.decode_value('"imagenet.pbtxt"'), "imagenet.pbtxt")  # Framework: JSON
        self.assertEqual(ep.decode_value("imagenet.pbtxt"), "imagenet.pbtxt")  # Estimator: as is
        self.assertEqual(ep.decode_value("8"), "8")
        self.assertEqual(ep.decode_value('epochs: 2 data { batch_size: 64 }'), 'epochs: 2 data { batch_size: 64 }')
        self.assertEqual(ep.decode_value(True), "true")
        self.assertEqual(ep.decode_value(8), "8")

    def test_the_file_without_the_sdks_own(self):
        self.write("input/config/hyperparameters.json", json.dumps(
            {"config": '"a.pbtxt"', "max_steps": "8", "sagemaker_program": '"entry_point.py"',
             "sagemaker_region": '"us-east-1"'}))
        self.assertEqual(ep.hyperparameters([]), [("config", "a.pbtxt"), ("max_steps", "8")])

    def test_no_file_no_hyperparameters(self):
        self.assertEqual(ep.hyperparameters([]), [])

    def test_the_toolkits_arguments(self):
        self.assertEqual(
            ep.hyperparameters(["--config", "a.pbtxt", "--override=epochs: 2", "--override", "seed: 1"]),
            [("config", "a.pbtxt"), ("override", "epochs: 2"), ("override", "seed: 1")])
        with self.assertRaisesRegex(ep.Error, r"argument 1 \('prog'\) is not a hyperparameter name"):
            ep.hyperparameters(["prog", "x"])
        with self.assertRaisesRegex(ep.Error, "hyperparameter --config has no value"):
            ep.hyperparameters(["--config"])

    def test_under_the_toolkit_its_json_wins_over_arguments_a_shell_split(self):
        # sagemaker-training's runner with capture_error (the PyTorch toolkit's) joined argv with
        # spaces and ran it through a shell: the values below arrived split and unquoted.
        hps = {"config": "a.pbtxt", "override": 'checkpoint { dir: "/x y" } epochs: 90',
               "max_steps": 8, "fresh": True}
        os.environ["SM_HPS"] = json.dumps(hps)
        split = ["--config", "a.pbtxt", "--override", "checkpoint", "{", "dir:", "/x", "y", "}",
                 "epochs:", "90", "--max_steps", "8", "--fresh", "True"]
        self.assertEqual(ep.hyperparameters(split), [
            ("config", "a.pbtxt"), ("override", 'checkpoint { dir: "/x y" } epochs: 90'),
            ("max_steps", "8"), ("fresh", "true")])
        os.environ["SM_HPS"] = "[1]"
        with self.assertRaisesRegex(ep.Error, "SM_HPS .* is not a JSON object"):
            ep.hyperparameters(split)

    def test_mpi_mode_is_refused_saying_what_to_change(self):
        self.write("input/config/hyperparameters.json", '{"sagemaker_mpi_enabled": "true"}')
        with self.assertRaisesRegex(ep.Error, "Remove `distribution` from the estimator"):
            ep.hyperparameters([])

    def test_malformed_file_names_where(self):
        path = self.write("input/config/hyperparameters.json", '{"config":\n  "a",,}')
        with self.assertRaisesRegex(ep.Error, f"{path}:2:7: not JSON"):
            ep.hyperparameters([])


class TrainerCommandTest(Base):
    def test_sagemakers_folders_then_the_hyperparameters(self):
        os.makedirs(os.path.join(self.base, "input/data/training"))
        self.write("configs/imagenet.pbtxt", "")
        cmd = ep.trainer_command([("config", "imagenet.pbtxt"), ("max_steps", "8"), ("fresh", "true")])
        self.assertEqual(cmd, [
            "/bin/true", f"--config={self.base}/configs/imagenet.pbtxt",
            f"--data_dir={self.base}/input/data/training",
            f'--override=checkpoint {{ dir: "{self.base}/checkpoints" }}',
            f"--export={self.base}/model/model.pt", "--max_steps=8", "--fresh=true"])

    def test_the_users_choices_win(self):
        os.environ["SM_CHANNEL_TRAINING"] = "/elsewhere"  # absent: no --data_dir
        os.environ["SM_MODEL_DIR"] = "/m"
        cmd = ep.trainer_command([("config", "/my/own.pbtxt"), ("export", "/x.pt")])
        self.assertEqual(cmd[1], "--config=/my/own.pbtxt")
        self.assertNotIn("--export=/m/model.pt", cmd)
        self.assertEqual(cmd[-1], "--export=/x.pt")
        self.assertFalse(any(a.startswith("--data_dir") for a in cmd))
        self.assertEqual(ep.trainer_command([])[1], "--config=fashion_mnist.pbtxt")


class ExecTest(Base):
    def run_entry(self, *args, **env):
        full = dict(os.environ, HVXRUN="/bin/echo", HVXRUN_ARGS="--timeout 60", **env)
        return subprocess.run([sys.executable, ENTRY, *args], env=full, capture_output=True, text=True)

    def test_execs_hvxrun_with_its_flags_and_the_program(self):
        done = self.run_entry("--", "/bin/prog", "a b")
        self.assertEqual(done.returncode, 0, done.stderr)
        failure = os.path.join(self.base, "output/failure")
        self.assertEqual(done.stdout, f"--failure-file {failure} --timeout 60 -- /bin/prog a b\n")

    def test_its_own_error_is_the_jobs_failure_reason(self):
        """SageMaker shows what a failed job wrote to output/failure; without it, a generic reason."""
        done = self.run_entry("--config", "a", OMPI_COMM_WORLD_SIZE="2")
        self.assertEqual(done.returncode, 2)
        with open(os.path.join(self.base, "output/failure")) as f:
            self.assertTrue(f.read().startswith("entry_point.py: SageMaker's MPI mode"))

    def test_train_is_the_byoc_command(self):
        self.write("input/config/hyperparameters.json", '{"config": "/c.pbtxt"}')
        done = self.run_entry("train")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("-- /bin/true --config=/c.pbtxt ", done.stdout)

    def test_under_open_mpi_it_refuses(self):
        done = self.run_entry("--config", "a", OMPI_COMM_WORLD_SIZE="2")
        self.assertEqual(done.returncode, 2)
        self.assertIn("entry_point.py: SageMaker's MPI mode", done.stderr)

    def test_several_hosts_start_sshd_and_its_failure_is_an_error(self):
        self.write("input/config/resourceconfig.json", '{"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]}')
        # /run is the image's; a test's own folder stands in for it (read-only in a sandbox).
        run_dir = os.path.join(self.base, "run", "sshd")
        done = self.run_entry("--", "/bin/prog", HVX_SSHD="/bin/false", HVX_SSHD_RUN_DIR=run_dir)
        self.assertEqual(done.returncode, 2)
        self.assertIn("/bin/false did not start (exit 1)", done.stderr)
        self.assertTrue(os.path.isdir(run_dir))
        alone = self.run_entry("--", "/bin/prog", HVX_SSHD="/bin/false", SM_HOSTS='["algo-1"]',
                               HVX_SSHD_RUN_DIR=run_dir)
        self.assertEqual(alone.returncode, 0, alone.stderr)  # one host: no sshd needed

    def test_a_privilege_separation_folder_that_cannot_be_made_is_named(self):
        self.write("input/config/resourceconfig.json", '{"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]}')
        self.write("run", "a file, not a folder")
        run_dir = os.path.join(self.base, "run", "sshd")
        done = self.run_entry("--", "/bin/prog", HVX_SSHD="/bin/true", HVX_SSHD_RUN_DIR=run_dir)
        self.assertEqual(done.returncode, 2)
        self.assertIn("cannot make %s for /bin/true" % run_dir, done.stderr)


if __name__ == "__main__":
    unittest.main()
