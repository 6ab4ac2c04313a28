/* A PETSc tutorial-style application (after KSP's ex2 and ex50) that solves one system with
   several KSPs, each configured from the options under its own prefix, so that one run
   compares PETSc's types with pipekrylov's (-python, -ksp_type python) under the same
   options.

     -problem poisson   2D Laplacian, Dirichlet (SPD), b = 1
     -problem convdiff  2D convection-diffusion, upwind (nonsymmetric), b = 1
     -problem neumann   2D Laplacian, Neumann (singular: the constants), its null space
                        attached (MatSetNullSpace, MatSetTransposeNullSpace), b not in
                        the range: PETSc removes the null space from b
     -n N               N x N grid (default 30)
     -cases K           solve with the KSPs of prefixes c0_ ... c{K-1}_, from x = 0

   Prints, for each case: "case PREFIX iterations N reason R relative residual E" with
   E = ||b' - A x|| / ||b'||, b' being b with the null space removed. */
#include <petscksp.h>

static PetscErrorCode Assemble(const char *problem, PetscInt n, Mat A)
{
  PetscInt Istart, Iend;
  PetscBool convdiff, neumann;
  PetscFunctionBeginUser;
  PetscCall(PetscStrcmp(problem, "convdiff", &convdiff));
  PetscCall(PetscStrcmp(problem, "neumann", &neumann));
  PetscCall(MatGetOwnershipRange(A, &Istart, &Iend));
  for (PetscInt row = Istart; row < Iend; row++) {
    PetscInt    i = row / n, j = row % n, cols[5], k = 0;
    PetscScalar vals[5], diag = 0.0;
    /* the neighbours: -1 each (convection adds -c on the upwind side, x and y) */
    const PetscInt    nb[4]  = {row - n, row + n, row - 1, row + 1};
    const PetscBool   in[4]  = {i > 0, i < n - 1, j > 0, j < n - 1};
    const PetscScalar up[4]  = {-0.8, 0.0, -0.5, 0.0};
    for (PetscInt d = 0; d < 4; d++) {
      if (in[d]) {
        cols[k]   = nb[d];
        vals[k++] = -1.0 + (convdiff ? up[d] : 0.0);
        diag += 1.0 + (convdiff ? -up[d] : 0.0);
      } else if (!neumann) {
        diag += 1.0 + (convdiff ? -up[d] : 0.0); /* Dirichlet: the missing neighbour's share stays */
      }
    }
    cols[k]   = row;
    vals[k++] = diag;
    PetscCall(MatSetValues(A, 1, &row, k, cols, vals, INSERT_VALUES));
  }
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  if (neumann) {
    MatNullSpace constants;
    PetscCall(MatNullSpaceCreate(PETSC_COMM_WORLD, PETSC_TRUE, 0, NULL, &constants));
    PetscCall(MatSetNullSpace(A, constants));
    PetscCall(MatSetTransposeNullSpace(A, constants));
    PetscCall(MatNullSpaceDestroy(&constants));
  }
  PetscFunctionReturn(0);
}

int main(int argc, char **argv)
{
  Mat          A;
  Vec          x, b, r, t;
  PetscInt     n = 30, cases = 1, Istart, Iend;
  char         problem[32] = "poisson";
  MatNullSpace nullspace;
  PetscCall(PetscInitialize(&argc, &argv, NULL, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-n", &n, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-cases", &cases, NULL));
  PetscCall(PetscOptionsGetString(NULL, NULL, "-problem", problem, sizeof(problem), NULL));
  PetscCall(MatCreateAIJ(PETSC_COMM_WORLD, PETSC_DECIDE, PETSC_DECIDE, n * n, n * n, 5, NULL, 5, NULL, &A));
  PetscCall(Assemble(problem, n, A));
  PetscCall(MatCreateVecs(A, &x, &b));
  PetscCall(VecDuplicate(b, &r));
  PetscCall(VecDuplicate(b, &t));
  PetscCall(VecGetOwnershipRange(b, &Istart, &Iend));
  for (PetscInt row = Istart; row < Iend; row++) PetscCall(VecSetValue(b, row, 1.0 + 0.05 * (PetscReal)((7 * row) % 11), INSERT_VALUES));
  PetscCall(VecAssemblyBegin(b));
  PetscCall(VecAssemblyEnd(b));
  for (PetscInt c = 0; c < cases; c++) {
    KSP       ksp;
    char      prefix[16];
    PetscInt  its;
    PetscReal norm, bnorm;
    KSPConvergedReason reason;
    PetscCall(PetscSNPrintf(prefix, sizeof(prefix), "c%" PetscInt_FMT "_", c));
    PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
    PetscCall(KSPSetOptionsPrefix(ksp, prefix));
    PetscCall(KSPSetOperators(ksp, A, A));
    PetscCall(KSPSetFromOptions(ksp));
    PetscCall(VecSet(x, 0.0));
    PetscCall(KSPSolve(ksp, b, x));
    PetscCall(KSPGetIterationNumber(ksp, &its));
    PetscCall(KSPGetConvergedReason(ksp, &reason));
    PetscCall(VecCopy(b, r));
    PetscCall(MatGetNullSpace(A, &nullspace));
    if (nullspace) PetscCall(MatNullSpaceRemove(nullspace, r));
    PetscCall(VecNorm(r, NORM_2, &bnorm));
    PetscCall(MatMult(A, x, t));
    PetscCall(VecAXPY(r, -1.0, t));
    PetscCall(VecNorm(r, NORM_2, &norm));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "case %s iterations %" PetscInt_FMT " reason %d relative residual %g\n", prefix, its, (int)reason, (double)(norm / bnorm)));
    PetscCall(KSPDestroy(&ksp));
  }
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&b));
  PetscCall(VecDestroy(&r));
  PetscCall(VecDestroy(&t));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFinalize());
  return 0;
}
