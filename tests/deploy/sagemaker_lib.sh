# Shared by the tests that start hvx as SageMaker does (sagemaker_test.sh, container_test.sh).

# sagemaker_ml ROOT HOST...: ROOT/HOST/ml for each HOST, as SageMaker writes a container's /opt/ml:
# input/config/resourceconfig.json (every HOST in the job, ml.c5.xlarge instances, eth0),
# inputdataconfig.json, the "training" channel (a FullyReplicated copy of ROOT/shards), and the
# empty model/, checkpoints/ and output/. Sets sagemaker_hosts for `hyperparameters`.
sagemaker_ml() {
    local root=$1 h ml hosts_json group_json=""
    shift
    sagemaker_hosts=("$@")
    sagemaker_root=$root
    hosts_json=$(printf '"%s", ' "$@")
    hosts_json="[${hosts_json%, }]"
    # The instance group lists its hosts in another order, as SageMaker may: the job's order is
    # "hosts".
    for h in "$@"; do group_json="\"$h\", $group_json"; done
    group_json="[${group_json%, }]"
    for h in "$@"; do
        ml=$root/$h/ml
        mkdir -p "$ml/input/config" "$ml/input/data/training" "$ml/model" "$ml/checkpoints" "$ml/output"
        cp "$root"/shards/* "$ml/input/data/training/"
        printf '{"current_host": "%s", "current_instance_type": "ml.c5.xlarge", "current_group_name": "homogeneousCluster", "hosts": %s, "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.c5.xlarge", "hosts": %s}], "network_interface_name": "eth0"}\n' \
            "$h" "$hosts_json" "$group_json" >"$ml/input/config/resourceconfig.json"
        echo '{"training": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}}' \
            >"$ml/input/config/inputdataconfig.json"
    done
}

# hyperparameters JSON: the job's hyperparameters.json on every host of sagemaker_ml.
hyperparameters() {
    local h
    for h in "${sagemaker_hosts[@]}"; do echo "$1" >"$sagemaker_root/$h/ml/input/config/hyperparameters.json"; done
}
