<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Controller;

use OCA\Istota\Tests\Support\HarnessTestCase;

/**
 * The personal page's approvals API end to end: controller → service → signed HTTP →
 * the fake sidecar. The user is always the session's; someone else's question is not
 * found, and policies can only be tightened.
 */
class ApprovalsApiTest extends HarnessTestCase {
	protected function setUp(): void {
		parent::setUp();
		$this->h->directory->addUser('alice', 'Alice', 'alice@example.com');
		$this->h->directory->addUser('bob', 'Bob', 'bob@example.com');
		$this->h->loginAs('alice');
	}

	public function testListsOnlyTheSessionUsersQuestions(): void {
		$response = $this->h->approvalsController()->list();
		$this->assertSame(200, $response->getStatus());
		$data = $response->getData();
		$this->assertSame([7], array_column($data['pending'], 'id'));
		$this->assertSame('ask', $data['policies']['effective']['external']);
		$paths = array_map(static fn (array $r): string => $r['uri'], self::$sidecar->requests());
		$this->assertContains('/v1/users/alice/approvals', $paths);
	}

	public function testApprovesAndDeniesOwnQuestion(): void {
		$response = $this->h->approvalsController()->decide(7, true);
		$this->assertSame(200, $response->getStatus());
		$this->assertSame('approved', $response->getData()['status']);
		$response = $this->h->approvalsController()->decide(7, false);
		$this->assertSame('denied', $response->getData()['status']);
	}

	public function testSomeoneElsesQuestionIsNotFound(): void {
		$response = $this->h->approvalsController()->decide(8, true);
		$this->assertSame(404, $response->getStatus());
		$this->assertSame('not_found', $response->getData()['code']);
	}

	public function testNotLoggedInIsRefusedBeforeTheSidecarIsAsked(): void {
		$this->h->loginAs(null);
		$this->assertSame(401, $this->h->approvalsController()->decide(7, true)->getStatus());
		$this->assertSame(401, $this->h->approvalsController()->list()->getStatus());
		$this->assertSame([], self::$sidecar->requests());
	}

	public function testPoliciesMayOnlyBeTightened(): void {
		$ok = $this->h->approvalsController()->savePolicies(['external' => 'deny']);
		$this->assertSame(200, $ok->getStatus());
		$this->assertSame('deny', $ok->getData()['effective']['external']);
		$looser = $this->h->approvalsController()->savePolicies(['external' => 'allow']);
		$this->assertSame(422, $looser->getStatus());
		$this->assertSame('invalid_settings', $looser->getData()['code']);
		$bad = $this->h->approvalsController()->savePolicies(['everything' => 'allow']);
		$this->assertSame(400, $bad->getStatus());
	}
}
