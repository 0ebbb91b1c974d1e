<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Service;

use OCA\Istota\Exception\SidecarNotConfiguredException;
use OCA\Istota\Service\RequestSigner;
use OCA\Istota\Service\WsTokenMinter;
use PHPUnit\Framework\TestCase;

/**
 * The PHP signer must agree byte for byte with the Go sidecar: both check the shared
 * vectors in sidecar/internal/signing/testdata/vectors.json.
 */
class RequestSignerTest extends TestCase {
	private const KEY = 'request-signer-test-key-0123456789abcdef';
	private const VECTORS = ISTOTA_REPO_ROOT . '/sidecar/internal/signing/testdata/vectors.json';

	/** @return array<string, array{0: array<string, string>}> */
	public function vectors(): array {
		$vectors = json_decode((string)file_get_contents(self::VECTORS), true, 512, JSON_THROW_ON_ERROR);
		$cases = [];
		foreach ($vectors as $vector) {
			$cases[$vector['name']] = [$vector];
		}
		return $cases;
	}

	public function testVectorFileHasCases(): void {
		$this->assertFileExists(self::VECTORS);
		$this->assertGreaterThanOrEqual(4, count($this->vectors()));
	}

	/**
	 * @dataProvider vectors
	 * @param array<string, string> $v
	 */
	public function testCanonicalStringMatchesVector(array $v): void {
		$signer = new RequestSigner();
		$this->assertSame($v['canonical'], $signer->canonical($v['method'], $v['path'], $v['timestamp'], $v['nonce'], $v['body']));
	}

	/**
	 * @dataProvider vectors
	 * @param array<string, string> $v
	 */
	public function testSignatureMatchesVector(array $v): void {
		$signer = new RequestSigner();
		$this->assertSame($v['signature'], $signer->signature($v['secret'], $v['method'], $v['path'], $v['timestamp'], $v['nonce'], $v['body']));
	}

	public function testMethodIsUpperCased(): void {
		$signer = new RequestSigner();
		$this->assertSame(
			$signer->signature(self::KEY, 'POST', '/v1/ping', '1', str_repeat('a', 32), '{}'),
			$signer->signature(self::KEY, 'post', '/v1/ping', '1', str_repeat('a', 32), '{}'),
		);
	}

	public function testHeadersCarryTimestampFreshNonceAndVerifiableSignature(): void {
		$signer = new RequestSigner();
		$first = $signer->headers(self::KEY, 'POST', '/v1/talk/events', '{"a":1}', 1795860000);
		$second = $signer->headers(self::KEY, 'POST', '/v1/talk/events', '{"a":1}', 1795860000);

		$this->assertSame('1795860000', $first['X-Istota-Timestamp']);
		$this->assertMatchesRegularExpression('/^[0-9a-f]{32}$/', $first['X-Istota-Nonce']);
		$this->assertNotSame($first['X-Istota-Nonce'], $second['X-Istota-Nonce'], 'every request needs its own nonce');
		$this->assertMatchesRegularExpression('/^v1=[0-9a-f]{64}$/', $first['X-Istota-Signature']);
		$this->assertSame(
			$signer->signature(self::KEY, 'POST', '/v1/talk/events', '1795860000', $first['X-Istota-Nonce'], '{"a":1}'),
			$first['X-Istota-Signature'],
		);
	}

	/** @return array<string, array{string}> */
	public function weakSecrets(): array {
		return ['empty' => [''], 'one byte' => ['k'], '31 bytes' => [str_repeat('s', 31)]];
	}

	/** @dataProvider weakSecrets */
	public function testWeakSecretsNeverSign(string $secret): void {
		$signer = new RequestSigner();
		try {
			$signer->headers($secret, 'POST', '/v1/ping', '{}', 1795860000);
			$this->fail('signed with a weak secret');
		} catch (SidecarNotConfiguredException $e) {
			$this->assertStringContainsString('occ istota:setup', $e->getMessage());
		}
		$this->expectException(SidecarNotConfiguredException::class);
		WsTokenMinter::token($secret, 'alice', 1795860060, str_repeat('a', 32));
	}
}
