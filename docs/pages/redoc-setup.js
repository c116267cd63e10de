import { init } from "./assets/redoc/redoc.standalone.js";
init("openapi.yaml", { disableTelemetry: true }, document.getElementById("redoc"));
