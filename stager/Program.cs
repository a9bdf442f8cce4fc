// The whole program is StagerProgram: a native hpcdata, compiled with every program in it, runs it too.
return await Hpc.Stager.StagerProgram.RunAsync(args);
