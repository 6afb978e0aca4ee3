// The minimal useChat page of the browser test, built where its packages are: the test copies
// this directory beside a node_modules (app/web's for ai@7, tests/e2e/web-v6's for ai@6).
export default {
  base: "./",
  logLevel: "warn",
  build: { outDir: "dist", emptyOutDir: true, target: "es2022" },
};
