/* A PETSc application: 2D Poisson (or, with -f, a matrix from a PETSc binary file and
   b = A * ones), solved by whatever KSP the options choose; with -solves k, k times from
   x = 0, printing the best KSPSolve time (the slowest rank's). */
#include <petscksp.h>

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
  for (PetscInt k = 0; k < solves; k++) {
    double t0, elapsed;
    PetscCall(VecSet(x, 0.0));
    PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
    t0 = MPI_Wtime();
    PetscCall(KSPSolve(ksp, b, x));
    elapsed = MPI_Wtime() - t0;
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, PETSC_COMM_WORLD));
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
