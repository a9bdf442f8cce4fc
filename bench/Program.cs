using Hpc.Bench;
using Hpc.Bench.Commands;
using Hpc.CommonData.Cli;

// The lab: what measures the product. `hpcdata bench …` and `hpcdata report …` run this program.
const string Me = "hpcdata bench";
return await new CommandTree(Me, "the lab: scale-model cluster, codec, cache and attach benchmarks, and their report", [
    VerbEntry.Of<BenchClusterOptions>(Me, BenchVerb.ClusterAsync),
    VerbEntry.Of<BenchCodecOptions>(Me, BenchCodecVerb.RunAsync),
    VerbEntry.Of<BenchFetchOptions>(Me, BenchFetchVerb.RunAsync),
    VerbEntry.Of<BenchCacheOptions>(Me, BenchCacheVerb.RunAsync),
    VerbEntry.Of<BenchAttachOptions>(Me, BenchAttachVerb.RunAsync),
    VerbEntry.Of<BenchFramesOptions>(Me, BenchFramesVerb.RunAsync),
    VerbEntry.Of<BenchUpdateOptions>(Me, BenchUpdateVerb.RunAsync),
    VerbEntry.Of<BenchTreeOptions>(Me, BenchTreeVerb.RunAsync),
    VerbEntry.Of<BenchSimulateOptions>(Me, BenchSimulateVerb.RunAsync),
    VerbEntry.Of<BenchCleanOptions>(Me, (o, _) => Task.FromResult(BenchVerb.Clean(o.Instance))),
    VerbEntry.Of<TcpServeOptions>(Me, (o, ct) => TcpTools.ServeAsync(o.Address, o.Port, ct)),
    VerbEntry.Of<TcpPullOptions>(Me, (o, ct) => TcpTools.PullAsync(o.From.Split(','), o.Bytes, o.WaitGo, ct)),
]).RunAsync(args);
