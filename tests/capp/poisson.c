/* A PETSc application: 2D Poisson (or, with -f, a matrix from a PETSc binary file and
   b = A * ones), solved by whatever KSP the options choose; with -solves k, k times from
   x = 0, printing the best KSPSolve time (the slowest rank's).  With -rtols r1,r2,..
   (at most 8), k rounds of one solve per tolerance, printing each one's iterations and
   best time (rounds interleave them: a noisy moment slows all alike). */
#include <petscksp.h>

/* One KSPSolve from x = 0: its time, the slowest rank's. */
static PetscErrorCode timed_solve(KSP ksp, Vec b, Vec x, double *elapsed)
{
  double t0;
  PetscFunctionBeginUser;
  PetscCall(VecSet(x, 0.0));
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
  t0 = MPI_Wtime();
  PetscCall(KSPSolve(ksp, b, x));
  *elapsed = MPI_Wtime() - t0;
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, elapsed, 1, MPI_DOUBLE, MPI_MAX, PETSC_COMM_WORLD));
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  Mat A; Vec x, b, r; KSP ksp; PetscInt n = 30, i, j, Istart, Iend, its, solves = 1;
  double best = 0.0;
  PetscReal norm, bnorm; KSPConvergedReason reason;
  char file[PETSC_MAX_PATH_LEN]; PetscBool from_file = PETSC_FALSE;
  PetscCall(PetscInitialize(&argc, &argv, NULL, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-n", &n, NULL));
  PetscCall(PetscOptionsGetString(NULL, NULL, "-f", file, sizeof(file), &from_file));
  if (from_file) {
    PetscViewer viewer;
    PetscCall(PetscViewerBinaryOpen(PETSC_COMM_WORLD, file, FILE_MODE_READ, &viewer));
    PetscCall(MatCreate(PETSC_COMM_WORLD, &A));
    PetscCall(MatSetType(A, MATAIJ));
    PetscCall(MatLoad(A, viewer));
    PetscCall(PetscViewerDestroy(&viewer));
    PetscCall(MatCreateVecs(A, &x, &b));
    PetscCall(VecSet(x, 1.0));
    PetscCall(MatMult(A, x, b));
  } else {
  PetscCall(MatCreateAIJ(PETSC_COMM_WORLD, PETSC_DECIDE, PETSC_DECIDE, n * n, n * n, 5, NULL, 5, NULL, &A));
  PetscCall(MatGetOwnershipRange(A, &Istart, &Iend));
  for (PetscInt row = Istart; row < Iend; row++) {
    i = row / n; j = row % n;
    if (i > 0) PetscCall(MatSetValue(A, row, row - n, -1.0, INSERT_VALUES));
    if (i < n - 1) PetscCall(MatSetValue(A, row, row + n, -1.0, INSERT_VALUES));
    if (j > 0) PetscCall(MatSetValue(A, row, row - 1, -1.0, INSERT_VALUES));
    if (j < n - 1) PetscCall(MatSetValue(A, row, row + 1, -1.0, INSERT_VALUES));
    PetscCall(MatSetValue(A, row, row, 4.0, INSERT_VALUES));
  }
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatCreateVecs(A, &x, &b));
  PetscCall(VecSet(b, 1.0));
  }
  PetscCall(VecSet(x, 0.0));
  PetscCall(VecDuplicate(b, &r));
  PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
  PetscCall(KSPSetOperators(ksp, A, A));
  PetscCall(KSPSetFromOptions(ksp));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-solves", &solves, NULL));
  {
    PetscReal rtols[8]; PetscInt nrtols = 8, sweep_its[8]; double sweep_best[8];
    PetscBool sweep = PETSC_FALSE;
    PetscCall(PetscOptionsGetRealArray(NULL, NULL, "-rtols", rtols, &nrtols, &sweep));
    for (PetscInt k = 0; sweep && k < solves; k++) {
      for (PetscInt t = 0; t < nrtols; t++) {
        double elapsed;
        PetscCall(KSPSetTolerances(ksp, rtols[t], PETSC_DEFAULT, PETSC_DEFAULT, PETSC_DEFAULT));
        PetscCall(timed_solve(ksp, b, x, &elapsed));
        PetscCall(KSPGetIterationNumber(ksp, &sweep_its[t]));
        if (k == 0 || elapsed < sweep_best[t]) sweep_best[t] = elapsed;
      }
    }
    for (PetscInt t = 0; sweep && t < nrtols; t++)
      PetscCall(PetscPrintf(PETSC_COMM_WORLD, "rtol %g iterations %" PetscInt_FMT " best %g s\n", (double)rtols[t], sweep_its[t], sweep_best[t]));
    if (sweep) solves = 1;   /* the lines below: one more solve at the last tolerance */
  }
  for (PetscInt k = 0; k < solves; k++) {
    double elapsed;
    PetscCall(timed_solve(ksp, b, x, &elapsed));
    if (k == 0 || elapsed < best) best = elapsed;
  }
  PetscCall(KSPGetIterationNumber(ksp, &its));
  PetscCall(KSPGetConvergedReason(ksp, &reason));
  PetscCall(MatMult(A, x, r));
  PetscCall(VecAYPX(r, -1.0, b));
  PetscCall(VecNorm(r, NORM_2, &norm));
  PetscCall(VecNorm(b, NORM_2, &bnorm));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "iterations %" PetscInt_FMT " reason %d relative residual %g\n", its, (int)reason, (double)(norm / bnorm)));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "best solve %g s of %" PetscInt_FMT "\n", best, solves));
  PetscCall(KSPDestroy(&ksp)); PetscCall(VecDestroy(&x)); PetscCall(VecDestroy(&b)); PetscCall(VecDestroy(&r)); PetscCall(MatDestroy(&A));
  PetscCall(PetscFinalize());
  return 0;
}
