// The whole program is NodeAgentProgram: a native hpcdata, compiled with every program in it, runs it too.
return await Hpc.NodeAgent.NodeAgentProgram.RunAsync(args);
