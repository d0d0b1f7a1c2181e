# Sourced by tests/cli/dist_*.sh: mpirun
# options for this sandbox — root, more ranks than cores, shared-memory transport only.
MPIRUN_ARGS=(--allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none
             --bind-to none)
export OMPI_MCA_rmaps_base_oversubscribe=1
