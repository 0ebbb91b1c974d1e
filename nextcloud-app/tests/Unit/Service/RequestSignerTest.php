<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Service;

use OCA\Istota\Service\RequestSigner;
use PHPUnit\Framework\TestCase;

/**
 * The PHP signer must agree byte for byte with the Go sidecar: both check the shared
 * vectors in sidecar/internal/signing/testdata/vectors.json.
 */
class RequestSignerTest extends TestCase {
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
			$signer->signature('k', 'POST', '/v1/ping', '1', str_repeat('a', 32), '{}'),
			$signer->signature('k', 'post', '/v1/ping', '1', str_repeat('a', 32), '{}'),
		);
	}

	public function testHeadersCarryTimestampFreshNonceAndVerifiableSignature(): void {
		$signer = new RequestSigner();
		$first = $signer->headers('secret', 'POST', '/v1/talk/events', '{"a":1}', 1795860000);
		$second = $signer->headers('secret', 'POST', '/v1/talk/events', '{"a":1}', 1795860000);

		$this->assertSame('1795860000', $first['X-Istota-Timestamp']);
		$this->assertMatchesRegularExpression('/^[0-9a-f]{32}$/', $first['X-Istota-Nonce']);
		$this->assertNotSame($first['X-Istota-Nonce'], $second['X-Istota-Nonce'], 'every request needs its own nonce');
		$this->assertMatchesRegularExpression('/^v1=[0-9a-f]{64}$/', $first['X-Istota-Signature']);
		$this->assertSame(
			$signer->signature('secret', 'POST', '/v1/talk/events', '1795860000', $first['X-Istota-Nonce'], '{"a":1}'),
			$first['X-Istota-Signature'],
		);
	}
}
