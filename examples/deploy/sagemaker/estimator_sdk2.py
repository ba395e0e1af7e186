# Starts hvx on SageMaker with the SageMaker Python SDK 2 (sagemaker<3): as estimator.py, with the
# generic Estimator. It has no `distribution` parameter (one given lands in **kwargs and is
# dropped): the image's entry point starts hvxrun on every instance, and hvxrun the ranks.
from sagemaker.estimator import Estimator

estimator = Estimator(
    image_uri="<account>.dkr.ecr.<region>.amazonaws.com/hvx:latest",
    role="<execution role ARN>",
    base_job_name="hvx-imagenet",
    instance_count=2,
    instance_type="ml.p4d.24xlarge",  # 8 GPUs each: 16 ranks
    volume_size=300,  # GB; holds the "training" channel where the instance has no NVMe (estimator.py)
    use_spot_instances=True,
    max_run=86400,
    max_wait=172800,
    checkpoint_s3_uri="s3://<bucket>/hvx/imagenet/checkpoints",
    hyperparameters={"config": "imagenet.pbtxt", "override": "epochs: 90"},
)
estimator.fit({"training": "s3://<bucket>/imagenet-tfrecords/"})

# In an image whose `train` is the SageMaker training toolkit's (a framework image with hvx
# installed), give the entry point instead; the toolkit runs it on every instance with the
# hyperparameters as arguments. Again no `distribution`: the toolkit's MPI mode is Open MPI's.
#   from sagemaker.pytorch import PyTorch
#   PyTorch(image_uri=..., role=..., instance_count=2, instance_type="ml.p4d.24xlarge",
#           entry_point="entry_point.py", source_dir="examples/deploy/sagemaker",
#           hyperparameters={"config": "imagenet.pbtxt"}).fit({"training": "s3://..."})
