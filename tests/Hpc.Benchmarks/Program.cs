using BenchmarkDotNet.Running;

// dotnet run -c Release --project tests/Hpc.Benchmarks -- --filter '*' [--job short]
BenchmarkSwitcher.FromAssembly(typeof(Hpc.Benchmarks.SegmentBenchmarks).Assembly).Run(args);
