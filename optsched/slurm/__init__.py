"""optsched in front of a Slurm cluster: the local test cluster, the agent, Slurm's commands."""
