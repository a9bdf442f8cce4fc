// The whole program is CacheHostProgram: a native hpcdata, compiled with every program in it, runs it too.
return await Hpc.CacheHost.CacheHostProgram.RunAsync(args);
