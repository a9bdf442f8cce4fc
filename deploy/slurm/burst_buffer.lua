--[[
HPC Common Data staging through Slurm's burst_buffer/lua plugin (Slurm 21.08 and later).

A user's batch script names its datasets, one per line:

    #BB_LUA hpcdata risk/market-history
    #BB_LUA hpcdata refdata/curves@3f2a9c1e
    #BB_LUA hpcdata stage /scratch/alice/positions.csv

A 'stage PATH [NAME]' line names a file or a directory (an absolute path; quote one with spaces as in a shell, nothing
is expanded) that the controller stages for the job before anything else, as USER/NAME (its own name by default) with
the job's user as its only reader: the user must be able to read it as themselves (its mode bits and every directory
above it; in a tree every directory and file, each checked on what was opened, links never followed; a file or
directory with an ACL is refused), and SlurmUser must be able to open it. A later job that stages the same bytes sends
nothing new.

and Slurm does the rest before the script's first line runs:
  at submit        the names resolve on the cache tier and, where Slurm gives the submitting uid (23.02 and later),
                   that user is among each dataset's readers; else sbatch refuses the job with one line saying why;
  while pending    each version is resolved once, checked against the user's read access, and referenced for the
                   job on the cache tier; the files it names are staged (squeue shows the job's reason as
                   BurstBufferStageIn meanwhile);
  before it runs   the running agents of exactly the job's nodes exchange the data among themselves (no job step, no
                   MPI ranks), each checking the job's user against the readers and pinning the copy as that user's;
                   the script starts only when every node holds the verified copy; otherwise this hook fails with
                   the nodes that are not ready, and Slurm requeues the job with that reason (and holds it
                   after its second retry); with --drain-silent-nodes in the site line below, the nodes whose agent
                   did not answer are drained first, so the requeued job is placed elsewhere;
  in the job       HPCDATA_DATASET, HPCDATA_DATASET_PATH (the node's copy) and HPCDATA_DATASETS are set;
  at teardown      (also of a cancelled, failed or requeued job) the job's references are dropped; the nodes' pins
                   go with the Epilog's `hpcdata noderelease`, as for every job.

Install: this file and burst_buffer.conf beside slurm.conf, `BurstBufferType=burst_buffer/lua` in slurm.conf, and
the two settings below. The peer key file must be readable by SlurmUser and root only; users never hold it.
--]]

-- The two lines a site sets: the hpcdata command, and the switches every hook is given (the cache tier comes from
-- /etc/hpcdata/client.conf as for every verb; see `hpcdata burst-buffer --help`).
local hpcdata = "/usr/bin/hpcdata"
local site = "--peer-key-file /etc/hpcdata/peer.key --state-dir /var/spool/hpcdata/burst-buffer"

local function quote(s)
	return "'" .. string.gsub(tostring(s), "'", "'\\''") .. "'"
end

-- Runs one hook of `hpcdata burst-buffer`; its last line of output is the reason Slurm shows when it fails.
local function run(hook, args)
	local command = hpcdata .. " burst-buffer " .. hook .. " " .. args .. " " .. site .. " 2>&1; echo \"hpcdata-exit=$?\""
	local p = io.popen(command)
	if p == nil then
		return slurm.ERROR, "hpcdata: cannot run " .. hpcdata
	end
	local output = p:read("*a")
	p:close()
	local code = tonumber(string.match(output, "hpcdata%-exit=(%d+)%s*$"))
	local text = string.gsub(output, "hpcdata%-exit=%d+%s*$", "")
	if code == 0 then
		if string.match(text, "%S") then
			slurm.log_info("hpcdata burst-buffer %s: %s", hook, text)
		end
		return slurm.SUCCESS
	end
	local reason = "hpcdata burst-buffer " .. hook .. " failed (exit " .. tostring(code) .. ")"
	for line in string.gmatch(text, "[^\n]+") do
		if string.match(line, "%S") then
			reason = string.gsub(line, "^hpcdata burst%-buffer: ", "hpcdata: ")
		end
	end
	slurm.log_error("hpcdata burst-buffer %s: %s", hook, text)
	return slurm.ERROR, reason
end

-- Synchronous, at submit: the names resolve, the user may read them.
function slurm_bb_job_process(job_script, uid, gid, job_info)
	local args = "--script " .. quote(job_script)
	if uid ~= nil then
		args = args .. " --uid " .. quote(uid)
	end
	return run("job-process", args)
end

-- No pools: the node's copy is accounted by the agent's own budget, not by Slurm.
function slurm_bb_pools()
	return slurm.SUCCESS
end

-- Pending: the versions resolved once, the user's access checked, the job's references on the cache tier.
function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script)
	return run("setup", "--job " .. quote(job_id) .. " --uid " .. quote(uid) .. " --script " .. quote(job_script))
end

-- Stage-in, still pending: the files and trees the job names ('stage PATH') staged as its user's, within StageInTimeout.
function slurm_bb_data_in(job_id, job_script)
	return run("data-in", "--job " .. quote(job_id) .. " --script " .. quote(job_script))
end

function slurm_bb_real_size(job_id)
	return slurm.SUCCESS
end

-- Synchronous, before the job starts: its environment.
function slurm_bb_paths(job_id, job_script, path_file, uid, gid)
	return run("paths", "--job " .. quote(job_id) .. " --path-file " .. quote(path_file))
end

-- Nodes allocated, the job not yet started: the agents of the job's nodes exchange the data.
function slurm_bb_pre_run(job_id, job_script, uid, gid, job_info)
	return run("pre-run", "--job " .. quote(job_id))
end

function slurm_bb_post_run(job_id, job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_data_out(job_id, job_script, uid, gid, job_info)
	return slurm.SUCCESS
end

function slurm_bb_job_teardown(job_id, job_script, hurry, uid, gid)
	return run("teardown", "--job " .. quote(job_id))
end

function slurm_bb_get_status(...)
	return slurm.SUCCESS, "hpcdata: see `hpcdata list` and `hpcdata status --cache-tier`\n"
end
