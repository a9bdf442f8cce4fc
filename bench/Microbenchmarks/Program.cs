using BenchmarkDotNet.Running;

// dotnet run -c Release --project bench/Microbenchmarks -- --filter '*' [--job short]
BenchmarkSwitcher.FromAssembly(typeof(Hpc.Benchmarks.SegmentBenchmarks).Assembly).Run(args);
