# Sourced by tests/cli/dist_*.sh: mpirun
# options for this sandbox — root, more ranks than cores, shared-memory transport only, and ranks
# that yield the core while they wait in a collective (busy polling starves the computing rank
# when ranks outnumber cores).
MPIRUN_ARGS=(--allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none
             --mca mpi_yield_when_idle 1 --bind-to none)
export OMPI_MCA_rmaps_base_oversubscribe=1
