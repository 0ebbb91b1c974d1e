<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Controller;

use OCA\Istota\Service\MemoryService;
use OCP\AppFramework\Http\Attribute\ApiRoute;
use OCP\AppFramework\Http\Attribute\NoAdminRequired;
use OCP\AppFramework\Http\DataResponse;
use OCP\IL10N;
use OCP\IRequest;
use OCP\IUserSession;
use Psr\Log\LoggerInterface;

/**
 * MemoryController serves the personal page's memory: USER.md, the curation audit,
 * CHANNEL.md files, dated memories, knowledge facts and memory search, all of the
 * logged-in user.
 */
class MemoryController extends OcsBaseController {
	public function __construct(
		IRequest $request,
		IUserSession $userSession,
		IL10N $l10n,
		LoggerInterface $logger,
		private readonly MemoryService $memory,
	) {
		parent::__construct($request, $userSession, $l10n, $logger);
	}

	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/memory/user')]
	public function userMemory(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->memory->userMemory($uid));
	}

	/** Saves USER.md if it is still at $etag; 409 conflict with current_etag otherwise. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'PUT', url: '/api/v1/me/memory/user')]
	public function saveUserMemory(mixed $content = null, mixed $etag = null): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->memory->saveUserMemory($uid, $content, $etag));
	}

	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/memory/audit')]
	public function audit(int $limit = 50): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->memory->audit($uid, $limit));
	}

	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/memory/channels')]
	public function channels(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->memory->channels($uid));
	}

	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/memory/dated')]
	public function dated(int $days = 30): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->memory->dated($uid, $days));
	}

	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/memory/facts')]
	public function facts(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->memory->facts($uid));
	}

	#[NoAdminRequired]
	#[ApiRoute(verb: 'POST', url: '/api/v1/me/memory/facts/{id}/invalidate', requirements: ['id' => '\d+'])]
	public function invalidateFact(int $id): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->memory->invalidateFact($uid, $id));
	}

	#[NoAdminRequired]
	#[ApiRoute(verb: 'DELETE', url: '/api/v1/me/memory/facts/{id}', requirements: ['id' => '\d+'])]
	public function deleteFact(int $id): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->memory->deleteFact($uid, $id));
	}

	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/memory/search')]
	public function search(string $q = '', int $limit = 20): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->memory->search($uid, $q, $limit));
	}
}
