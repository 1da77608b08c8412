// The JVM side of the keystore tests (tests/jvm/test_jvm_keystore.py): a TLS server whose identity is a
// PKCS#12 keystore, or a TLS client that verifies with a PKCS#12 truststore, as a Java workload would use
// the files tls-injector writes into its Secret. Built with javac by the test; JDK classes only.
//
//   java TlsPeer server <keystore.p12> <password> <port-file>   serve one connection, send "hello from java"
//   java TlsPeer client <truststore.p12> <password> <port> <host name>
//                                                      connect to 127.0.0.1:<port> verifying <host name>,
//                                                      print the first line the server sends
import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.util.List;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLServerSocket;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;

public final class TlsPeer {
    public static void main(String[] args) throws Exception {
        char[] password = args[2].toCharArray();
        KeyStore store = KeyStore.getInstance("PKCS12");
        try (FileInputStream in = new FileInputStream(args[1])) {
            store.load(in, password);
        }
        SSLContext context = SSLContext.getInstance("TLSv1.3");
        if (args[0].equals("server")) {
            KeyManagerFactory keys = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            keys.init(store, password);
            context.init(keys.getKeyManagers(), null, null);
            serve(context, Path.of(args[3]));
        } else {
            TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            trust.init(store);
            context.init(null, trust.getTrustManagers(), null);
            call(context, Integer.parseInt(args[3]), args[4]);
        }
    }

    private static void serve(SSLContext context, Path portFile) throws Exception {
        try (SSLServerSocket server = (SSLServerSocket) context.getServerSocketFactory()
                .createServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            server.setSoTimeout(20_000);  // the test's whole budget: never wait for ever
            Files.writeString(portFile, Integer.toString(server.getLocalPort()));
            try (SSLSocket peer = (SSLSocket) server.accept()) {
                peer.startHandshake();
                OutputStream out = peer.getOutputStream();
                out.write("hello from java\n".getBytes(StandardCharsets.US_ASCII));
                out.flush();
            }
        }
    }

    private static void call(SSLContext context, int port, String host) throws Exception {
        try (Socket plain = new Socket(InetAddress.getLoopbackAddress(), port)) {
            plain.setSoTimeout(20_000);
            // Layered over a loopback socket, named `host`: the name verified against the certificate.
            SSLSocket tls = (SSLSocket) context.getSocketFactory().createSocket(plain, host, port, true);
            SSLParameters parameters = tls.getSSLParameters();
            parameters.setEndpointIdentificationAlgorithm("HTTPS");
            parameters.setServerNames(List.of(new SNIHostName(host)));
            tls.setSSLParameters(parameters);
            tls.startHandshake();
            BufferedReader in = new BufferedReader(new InputStreamReader(tls.getInputStream(), StandardCharsets.US_ASCII));
            System.out.println(in.readLine());
            tls.close();
        }
    }
}
