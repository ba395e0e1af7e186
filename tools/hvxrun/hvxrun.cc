// hvxrun: starts one process per slot with MPICH's mpiexec; see hvx/launch/README.md.
#include "hvx/launch/launch.h"

int main(int argc, char** argv) { return hvx::launch::HvxrunMain(argc, argv); }
