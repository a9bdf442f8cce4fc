using Hpc.Bench;
using Hpc.Bench.Commands;
using Hpc.CommonData.Cli;

// The lab: what measures the product. `hpcdata bench …` and `hpcdata report …` run this program.
const string Me = "hpcdata bench";
return await new CommandTree(Me, "the lab: scale-model cluster, codec, cache and attach benchmarks, and their report", [
    VerbEntry.For<BenchClusterOptions>(Me, BenchVerb.ClusterAsync),
    VerbEntry.For<BenchCodecOptions>(Me, BenchCodecVerb.RunAsync),
    VerbEntry.For<BenchFetchOptions>(Me, BenchFetchVerb.RunAsync),
    VerbEntry.For<BenchCacheOptions>(Me, BenchCacheVerb.RunAsync),
    VerbEntry.For<BenchAttachOptions>(Me, BenchAttachVerb.RunAsync),
    VerbEntry.For<BenchFramesOptions>(Me, BenchFramesVerb.RunAsync),
    VerbEntry.For<BenchUpdateOptions>(Me, BenchUpdateVerb.RunAsync),
    VerbEntry.For<BenchTreeOptions>(Me, BenchTreeVerb.RunAsync),
    VerbEntry.For<BenchImportsOptions>(Me, BenchImportsVerb.RunAsync),
    VerbEntry.For<BenchSimulateOptions>(Me, BenchSimulateVerb.RunAsync),
    VerbEntry.For<BenchCleanOptions>(Me, (o, _) => Task.FromResult(BenchVerb.Clean(o.Instance))),
    VerbEntry.For<TcpServeOptions>(Me, (o, ct) => TcpTools.ServeAsync(o.Address, o.Port, ct)),
    VerbEntry.For<BenchLoadOptions>(Me, (o, ct) => BackgroundLoad.RunAsync(o.Kind, o.Seconds, o.Dir, ct)),
    VerbEntry.For<TcpPullOptions>(Me, (o, ct) => TcpTools.PullAsync(o.From.Split(','), o.Bytes, o.WaitGo, ct)),
]).RunAsync(args);
