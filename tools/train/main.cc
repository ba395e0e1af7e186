// The trainer: `bazel run //tools:train -- --config=fashion_mnist.pbtxt`. See
// hvx/train/train_main.h.
#include "hvx/train/train_main.h"

int main(int argc, char** argv) { return hvx::train::TrainMain(argc, argv); }
