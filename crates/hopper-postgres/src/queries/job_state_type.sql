SELECT NULL::hopper.job_state
