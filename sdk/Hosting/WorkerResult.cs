namespace Hpc.CommonData.Hosting;

/// <summary>
/// What a worker prints (one JSON line). AttachMs is the first open in a fresh process (includes JIT); WarmAttachMs the median of the re-opens in the same
/// process (0 with --reopens 0). VerifyMs is the worker's own hash of a mapped copy; 0 in stream and direct mode, whose
/// open already hashed the private copy before returning it. VerifiedUnixMs is the wall-clock moment the whole dataset
/// was open, touched and (with --verify) re-hashed, so a launcher on the same machine can time workers from a common
/// start. Computed is what a service's own pass over the data produced (the samples' value-at-risk), absent for a plain
/// check. MainUnixMs is when the worker's own code began (the runtime and the command line are up: a launcher
/// subtracts its launch moment for the process start-up); TouchMs the first touch of the mapping (--touch first: its
/// first byte; all: a byte per page, as a first full pass over the data pays it), 0 outside map mode.
/// </summary>
public sealed record WorkerResult(int Pid, string Mode, string Version, long Bytes, double AttachMs, double WarmAttachMs, double VerifyMs, double ComputeMs,
    bool Verified, double VerifiedUnixMs = 0, string? Computed = null, double MainUnixMs = 0, double TouchMs = 0);
