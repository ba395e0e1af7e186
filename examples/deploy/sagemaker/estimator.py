# Starts hvx on SageMaker with the SageMaker Python SDK 3 (`pip install sagemaker`, 3.x): the image
# of this folder's Dockerfile on 2 instances of 8 GPUs each (16 ranks). SageMaker runs the image's
# `train` on every instance: entry_point.py starts sshd and hvxrun, which starts one rank per GPU
# on every instance from the first. No `distributed=` and no source code: the image launches.
# The data are TFRecord shards (tools/make_records) in S3, the "training" channel; the trainer's
# checkpoints go to checkpoint_config's S3 prefix and come back when the job is restarted.
# SDK 2 (sagemaker<3): estimator_sdk2.py.
# SageMaker gives the container Docker's /dev/shm (64 MiB) and no setting for it: hvx's CPU data
# plane then falls back to MPI, saying so in rank 0's log; GPU ranks average over NCCL. A failed
# job's reason (hvxrun's summary) is what SageMaker shows, from /opt/ml/output/failure.
from sagemaker.train import ModelTrainer
from sagemaker.core.training.configs import CheckpointConfig, Compute, InputData, StoppingCondition

trainer = ModelTrainer(
    training_image="<account>.dkr.ecr.<region>.amazonaws.com/hvx:latest",
    role="<execution role ARN>",
    base_job_name="hvx-imagenet",
    compute=Compute(
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
        enable_managed_spot_training=True,
        # File mode copies the "training" channel to each instance's disk before the job starts:
        # on an instance without local NVMe storage (ml.p3) that is this EBS volume (30 GB unless
        # set), which must hold the shards (ImageNet's TFRecords: about 150 GB) and checkpoints.
        volume_size_in_gb=300,
    ),
    stopping_condition=StoppingCondition(max_runtime_in_seconds=86400, max_wait_time_in_seconds=172800),
    checkpoint_config=CheckpointConfig(s3_uri="s3://<bucket>/hvx/imagenet/checkpoints"),
    # Each becomes a trainer flag: --config=imagenet.pbtxt --override=... (entry_point.py).
    hyperparameters={"config": "imagenet.pbtxt", "override": "epochs: 90"},
)
trainer.train(input_data_config=[InputData(channel_name="training", data_source="s3://<bucket>/imagenet-tfrecords/")])
