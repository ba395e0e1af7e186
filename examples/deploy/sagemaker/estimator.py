# The SageMaker estimator that runs hvx: one entry point per instance (hvxrun then starts one rank
# per GPU), with ssh between the instances, which SageMaker sets up when MPI is enabled. The
# image is one with hvx built in (hvxrun and train on PATH); the data are TFRecord shards
# (tools/make_records) in S3.
from sagemaker.estimator import Estimator

estimator = Estimator(
    image_uri="<account>.dkr.ecr.<region>.amazonaws.com/hvx:latest",
    role="<execution role ARN>",
    instance_count=2,
    instance_type="ml.p4d.24xlarge",   # 8 GPUs each: 16 ranks
    entry_point="entry_point.sh",
    source_dir="examples/deploy/sagemaker",
    # SageMaker's MPI set-up gives the instances ssh to each other; hvxrun does the launching, so
    # one process per host here, not one per GPU.
    distribution={"mpi": {"enabled": True, "processes_per_host": 1}},
    environment={"HVX_CONFIG": "imagenet.pbtxt"},
)
estimator.fit({"training": "s3://<bucket>/imagenet-tfrecords/"})
